"""Issuers: evidence from the emulated TEE or from the hardware the process runs on."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

from contrast.api.teeendpoint import DEFAULT_SOCKET, SOCKET_ENV, SocketIssuer
from contrast.atls.errors import InvalidIssuerOptions
from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.attestation.emulated.tdx import EmulatedTdx
from contrast.attestation.evidence import Evidence, Tee
from contrast.attestation.guest import issuer as guest

POLICY_HASH_SIZE = 32
MR_CONFIG_ID_SIZE = 48


class TeeKind(StrEnum):
    HARDWARE = "hardware"
    # A pod of the emulated runtime: its node's TEE socket (CONTRAST_TEE_SOCKET, default
    # /run/contrast-tee/tee.sock), which fixes the policy hash itself.
    EMULATED = "emulated"
    # A local process holding the emulated TEE's state and told its policy hash (the demo).
    EMULATED_SNP = "emulated-snp"
    EMULATED_TDX = "emulated-tdx"


@dataclass(frozen=True)
class EmulatedSnpIssuer:
    """SNP reports from the emulated TEE, with HOST_DATA set as the hypervisor would."""

    tee: EmulatedSnp
    policy_hash: bytes

    def issue(self, report_data: bytes) -> Evidence:
        report, endorsements = self.tee.issue(report_data, self.policy_hash)
        return Evidence(Tee.SNP, report, tuple(endorsements))


@dataclass(frozen=True)
class EmulatedTdxIssuer:
    """TDX quotes from the emulated TEE, with MRCONFIGID = policy hash ‖ 16 zero bytes."""

    tee: EmulatedTdx
    policy_hash: bytes

    def issue(self, report_data: bytes) -> Evidence:
        mr_config_id = self.policy_hash.ljust(MR_CONFIG_ID_SIZE, b"\0")
        quote = self.tee.issue(report_data, mr_config_id)
        # The collateral a QGS would hand out with the quote (TCB info, QE identity, CRLs).
        collateral = self.tee.collateral_files(now=datetime.now(UTC))
        return Evidence(Tee.TDX, quote, tuple(collateral))


class HardwareIssuer:
    """Evidence from the SEV-SNP or TDX guest this process runs in."""

    def issue(self, report_data: bytes) -> Evidence:
        return guest.issue(report_data).to_evidence()


def make_issuer(
    kind: TeeKind, *, state_dir: Path | None, policy_hash: bytes | None
) -> EmulatedSnpIssuer | EmulatedTdxIssuer | HardwareIssuer | SocketIssuer:
    if kind is TeeKind.HARDWARE:
        return HardwareIssuer()
    if kind is TeeKind.EMULATED:
        if state_dir is not None or policy_hash is not None:
            raise InvalidIssuerOptions(
                "--tee emulated takes evidence from the pod's TEE socket; the node fixes the"
                " policy hash and keeps the TEE's state",
                hint="drop --tee-state and --policy-hash",
            )
        return SocketIssuer(Path(os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET))
    if state_dir is None or policy_hash is None:
        raise InvalidIssuerOptions(
            "the emulated TEE needs its state directory and the workload's policy hash",
            hint="pass --tee-state DIR and --policy-hash HEX",
        )
    if len(policy_hash) != POLICY_HASH_SIZE:
        raise InvalidIssuerOptions(
            f"a policy hash is {POLICY_HASH_SIZE} bytes, got {len(policy_hash)}"
        )
    if kind is TeeKind.EMULATED_SNP:
        return EmulatedSnpIssuer(EmulatedSnp(state_dir), policy_hash)
    return EmulatedTdxIssuer(EmulatedTdx(state_dir), policy_hash)
