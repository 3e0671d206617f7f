"""AMD's roots as the package ships them: read when a product is first asked for, never before."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import Encoding

import contrast.attestation.snp.trust as trust_module
from contrast.attestation.errors import AttestationError, Reason
from contrast.attestation.snp.report import Product
from contrast.attestation.snp.trust import GENUINE_AMD_ROOTS, AmdRootStore, ProductRoots
from tests.fresh_python import printed_by

ROOTS = Path(trust_module.__file__).parent / "roots"


@pytest.mark.parametrize("product", list(Product))
def test_each_product_s_roots_are_the_files_shipped(product: Product) -> None:
    roots = GENUINE_AMD_ROOTS.require(product)
    folder = ROOTS / product.value.lower()
    for name in ("ark", "ask", "asvk"):
        certificate = getattr(roots, name)
        assert certificate.public_bytes(Encoding.PEM) == (folder / f"{name}.pem").read_bytes()


def test_the_store_is_amd_s_and_lists_the_products_in_order() -> None:
    assert GENUINE_AMD_ROOTS.genuine
    assert GENUINE_AMD_ROOTS.name == "AMD"
    assert list(GENUINE_AMD_ROOTS.products) == [Product.MILAN, Product.GENOA, Product.TURIN]
    assert len(GENUINE_AMD_ROOTS.products) == 3
    assert set(dict(GENUINE_AMD_ROOTS.products)) == set(Product)


def test_a_product_is_read_once() -> None:
    assert GENUINE_AMD_ROOTS.products[Product.GENOA] is GENUINE_AMD_ROOTS.require(Product.GENOA)
    # A product's name is its key too, as in the dict any other store copies its products into.
    assert GENUINE_AMD_ROOTS.products["Genoa"] is GENUINE_AMD_ROOTS.products[Product.GENOA]  # type: ignore[index]


def test_an_unknown_product_is_no_key() -> None:
    products = GENUINE_AMD_ROOTS.products
    with pytest.raises(KeyError):
        products["Naples"]  # type: ignore[index]
    assert products.get("Naples") is None  # type: ignore[call-overload]
    assert "Naples" not in products


def test_the_roots_cannot_be_replaced() -> None:
    with pytest.raises(TypeError):
        GENUINE_AMD_ROOTS.products[Product.MILAN] = GENUINE_AMD_ROOTS.products[Product.GENOA]  # type: ignore[index]


def test_another_store_keeps_a_read_only_copy_of_what_it_was_given() -> None:
    given = {Product.MILAN: GENUINE_AMD_ROOTS.require(Product.MILAN)}
    store = AmdRootStore(given)
    given.clear()
    assert list(store.products) == [Product.MILAN]
    assert not store.genuine
    with pytest.raises(AttestationError) as refused:
        store.require(Product.TURIN)
    assert refused.value.reason is Reason.UNTRUSTED_VCEK
    assert "trusted: Milan" in str(refused.value)
    assert isinstance(store.require(Product.MILAN), ProductRoots)


def test_importing_the_roots_reads_no_certificate() -> None:
    probe = (
        "import sys\n"
        "from contrast.attestation import certificates\n"
        "import contrast.attestation.snp.trust\n"
        "print(certificates._load_certificates.cache_info().currsize)\n"
        "print('importlib.resources' in sys.modules)\n"
    )
    assert printed_by(probe) == ["0", "False"]
