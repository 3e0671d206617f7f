"""Reference values for the platforms a deployment uses.

Real platforms take the values of their runtime: the one `contrast runtime build` wrote into the
workspace's `reference-values.json` (keyed by its handler), else this release's defaults
(`contrast.manifest.defaults`); both name the values only the operator knows (bare-metal TCB,
MRSEAM, TDX RTMR0) as missing. The emulated platforms trust the
root of one emulated TEE, kept in a state directory that the Coordinator and the Initializers of
the local flow share; its entry can never admit real evidence, nor real entries emulated evidence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contrast.generate.errors import GenerateError
from contrast.manifest.errors import ManifestError
from contrast.manifest.model import ReferenceValues
from contrast.platforms import Platform, Tee

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
        if platform.tee is Tee.TDX:
            from contrast.attestation.emulated.tdx import EmulatedTdx  # noqa: PLC0415
            from contrast.manifest.emulated import emulated_tdx_reference_values  # noqa: PLC0415

            return {"tdx": [emulated_tdx_reference_values(EmulatedTdx(self.emulated_tee))]}, []
        from contrast.attestation.emulated.snp import EmulatedSnp  # noqa: PLC0415
        from contrast.manifest.emulated import emulated_snp_reference_values  # noqa: PLC0415

        return {"snp": [emulated_snp_reference_values(EmulatedSnp(self.emulated_tee))]}, []
