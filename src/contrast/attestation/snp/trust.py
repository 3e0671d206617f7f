"""What an SNP verifier trusts: per product, an ARK and the ASK/ASVK it signed.

The genuine AMD certificates ship as package data (byte-identical to go-sev-guest's and
virtee/sev's copies; research/attestation.md §2.7). The emulated TEE builds a store from its own
hierarchy instead: the verifier is the same code, only this object differs, which is how emulated
evidence verifies yet can never pass for AMD's.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from cryptography import x509

from contrast.attestation.certificates import load_certificate
from contrast.attestation.errors import Reason, VerificationFailed
from contrast.attestation.snp.report import Product


@dataclass(frozen=True)
class ProductRoots:
    """One product's ARK, its ASK (issues VCEKs) and its ASVK (issues VLEKs), if known."""

    ark: x509.Certificate
    ask: x509.Certificate
    asvk: x509.Certificate | None = None


@dataclass(frozen=True, eq=False)
class AmdRootStore:
    """Trusted roots by product.

    `genuine` is True only for AMD's own roots; the emulated TEE's store says False, so its
    evidence can never pass as real hardware's.
    """

    products: Mapping[Product, ProductRoots]
    genuine: bool = False

    def __post_init__(self) -> None:
        # A read-only copy: one store is shared by every verification. AMD's own roots are
        # read-only already and read when first needed (see `_PackagedRoots`).
        if not isinstance(self.products, _PackagedRoots):
            object.__setattr__(self, "products", MappingProxyType(dict(self.products)))

    @property
    def name(self) -> str:
        """Whose roots these are, for messages."""
        return "AMD" if self.genuine else "non-AMD (emulated or test)"

    def for_product(self, product: Product) -> ProductRoots | None:
        return self.products.get(product)

    def require(self, product: Product) -> ProductRoots:
        """The roots of `product`; VerificationFailed(UNTRUSTED_VCEK) if none are trusted."""
        roots = self.products.get(product)
        if roots is None:
            known = ", ".join(p.value for p in self.products) or "none"
            raise VerificationFailed(
                Reason.UNTRUSTED_VCEK,
                f"no trusted {self.name} roots for {product.value} (trusted: {known})",
            )
        return roots


class _PackagedRoots(Mapping[Product, ProductRoots]):
    """AMD's own ARK, ASK and ASVK for Milan, Genoa and Turin, from the package data.

    A product's certificates are read and parsed when it is first looked up, not at import: a
    report needs one product's three, and reading all nine cost `contrast evidence verify` a
    tenth of its start-up.
    """

    def __getitem__(self, product: Product) -> ProductRoots:
        try:
            known = Product(product)
        except ValueError:
            raise KeyError(product) from None
        return _packaged_product_roots(known)

    def __iter__(self) -> Iterator[Product]:
        return iter(Product)

    def __len__(self) -> int:
        return len(Product)


@functools.cache
def _packaged_product_roots(product: Product) -> ProductRoots:
    ark, ask, asvk = (
        load_certificate(_package_data(product, name), what=f"AMD {name}")
        for name in ("ark", "ask", "asvk")
    )
    return ProductRoots(ark=ark, ask=ask, asvk=asvk)


def _package_data(product: Product, name: str) -> bytes:
    # From the package's folder, as policy's assets are: importlib.resources would load tempfile
    # and zipfile (and pkgutil importlib.util), which cost more than the certificates themselves.
    return (_ROOTS / product.value.lower() / f"{name}.pem").read_bytes()


_ROOTS = Path(__file__).parent / "roots"


GENUINE_AMD_ROOTS = AmdRootStore(_PackagedRoots(), genuine=True)
