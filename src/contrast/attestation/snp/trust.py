"""What an SNP verifier trusts: per product, an ARK and the ASK/ASVK it signed.

The genuine AMD certificates ship as package data (byte-identical to go-sev-guest's and
virtee/sev's copies; research/attestation.md §2.7). The emulated TEE builds a store from its own
hierarchy instead: the verifier is the same code, only this object differs, which is how emulated
evidence verifies yet can never pass for AMD's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
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
        # A read-only copy: one store is shared by every verification.
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


def load_genuine_roots() -> AmdRootStore:
    """AMD's own ARK, ASK and ASVK for Milan, Genoa and Turin, from the package data."""
    folder = resources.files(__package__).joinpath("roots")
    products = {}
    for product in Product:
        directory = folder.joinpath(product.value.lower())
        ark, ask, asvk = (
            load_certificate(directory.joinpath(f"{name}.pem").read_bytes(), what=f"AMD {name}")
            for name in ("ark", "ask", "asvk")
        )
        products[product] = ProductRoots(ark=ark, ask=ask, asvk=asvk)
    return AmdRootStore(products, genuine=True)


GENUINE_AMD_ROOTS = load_genuine_roots()
