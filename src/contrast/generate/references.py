"""Reference values for the platforms a deployment uses.

Real platforms take the values of their runtime: the one `contrast runtime build` wrote into the
workspace's `reference-values.json` (keyed by its handler), else this release's defaults
(`contrast.manifest.defaults`); both name the values only the operator knows (bare-metal TCB,
MRSEAM, TDX RTMR0) as missing. The emulated platforms trust the
root of one emulated TEE, read from its certificates: a node's exported public roots, or the state
directory that the Coordinator and the Initializers of the local flow share; its entry can never
admit real evidence, nor real entries emulated evidence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from contrast.attestation.tee import Tee
from contrast.generate.errors import GenerateError
from contrast.manifest.errors import ManifestError
from contrast.manifest.model import ReferenceValues
from contrast.platforms import Platform

# Reference values by TEE kind as `contrast runtime reference-values` writes them.
ReferenceValueSet = dict[str, list[dict[str, Any]]]


@dataclass(frozen=True)
class ReferenceValueProvider:
    """`(platform) → (reference values by TEE kind, notes on values the user must fill in)`."""

    emulated_tee: Path | None = None
    # Values by runtime handler as `contrast runtime reference-values` writes them; None takes
    # the ones embedded in this release.
    embedded: Mapping[str, ReferenceValueSet] | None = None
    # The runtime handler of each platform whose runtime was built (`contrast runtime build`);
    # the others use this release's.
    handlers: Mapping[Platform, str] = field(default_factory=dict)

    def __call__(self, platform: Platform) -> tuple[ReferenceValues, list[str]]:
        values, notes = self._values(platform)
        try:
            return ReferenceValues.from_json(values), notes
        except ManifestError as error:
            raise GenerateError(
                f"the reference values of {platform.display_name}: {error.message}",
                hint="rebuild them with `contrast runtime build`, or fix the file",
            ) from None

    def _values(self, platform: Platform) -> tuple[ReferenceValueSet, list[str]]:
        # Each kind of platform imports what it needs here: the modules of every TEE together
        # cost a tenth of a second at each start, most of an unchanged re-run of one platform.
        if not platform.emulated:
            from contrast.manifest.defaults import default_reference_values  # noqa: PLC0415

            return default_reference_values(
                platform, embedded=self.embedded, handler=self.handlers.get(platform)
            )
        if self.emulated_tee is None:
            raise GenerateError(
                f"{platform.display_name} needs the emulated TEE whose evidence it admits",
                hint="pass --emulated-tee DIR (the --tee-state of the Coordinator and workloads)",
            )
        return _emulated_values(platform, self.emulated_tee), []


def _emulated_values(platform: Platform, directory: Path) -> ReferenceValueSet:
    """The entry admitting the emulated TEE whose roots' certificates are in `directory`.

    Only the certificates are read (`load_roots`), so the directory may be a node's exported
    public part (`contrast-emulated-runtime setup --public DIR`) as well as a TEE's state; a
    directory that exists is never written. Only a missing one is made, as a new emulated TEE
    (SNP and TDX) for the local flow, whose Coordinator and workloads take it as --tee-state.
    Before, a directory without the keys got a new hierarchy written into it: an exported one
    gave reference values of fresh keys, which the node's evidence never matches.
    """
    # Imported here: the modules of every TEE together cost a tenth of a second at each start.
    from contrast.attestation.emulated.snp import EMULATED_MEASUREMENT, EmulatedSnp  # noqa: PLC0415
    from contrast.attestation.emulated.snp import load_roots as load_snp_roots  # noqa: PLC0415
    from contrast.attestation.emulated.tdx import EmulatedTdx  # noqa: PLC0415
    from contrast.attestation.emulated.tdx import load_roots as load_tdx_roots  # noqa: PLC0415
    from contrast.attestation.snp.report import Product  # noqa: PLC0415
    from contrast.manifest import emulated  # noqa: PLC0415

    if not directory.exists():
        EmulatedSnp(directory)
        EmulatedTdx(directory).roots  # noqa: B018 (loading creates the hierarchy)
    hint = (
        "pass the node's public roots (`contrast-emulated-runtime setup --public DIR`), or a"
        " directory that does not exist yet for a new emulated TEE"
    )
    if platform.tee is Tee.TDX:
        tdx_roots = load_tdx_roots(directory)
        if tdx_roots is None:
            raise GenerateError(
                f"{directory} holds no emulated TDX roots (tdx/chain.pem, tdx/tcb_signing.pem)",
                hint=hint,
            )
        # The attributes emulated_tdx_reference_values reads of an EmulatedTdx: its roots.
        tdx = cast("EmulatedTdx", _Roots(roots=tdx_roots))
        return {"tdx": [emulated.emulated_tdx_reference_values(tdx)]}
    snp_roots = load_snp_roots(directory, Product.MILAN)
    if snp_roots is None:
        raise GenerateError(
            f"{directory} holds no emulated SNP roots (snp/milan/ark.pem, ask.pem, asvk.pem)",
            hint=hint,
        )
    # The attributes emulated_snp_reference_values reads of an EmulatedSnp.
    snp = cast(
        "EmulatedSnp",
        _Roots(roots=snp_roots, product=Product.MILAN, measurement=EMULATED_MEASUREMENT),
    )
    return {"snp": [emulated.emulated_snp_reference_values(snp)]}


@dataclass(frozen=True)
class _Roots:
    """An emulated TEE as its reference values see it: roots' certificates, no keys."""

    roots: Any
    product: Any = None
    measurement: bytes = b""
