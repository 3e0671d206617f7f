"""`contrast evidence verify`: check an SNP report or TDX quote and print its claims."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from contrast.attestation import tee
from contrast.attestation import verdict as verdicts
from contrast.attestation.certificates import parse_time
from contrast.boundedfile import read_bounded
from contrast.cli.errors import CliError

EXIT_VALID = 0
EXIT_INVALID = 1
# Bounds on the files read (`contrast.boundedfile`), far above real ones: a report is 1184
# bytes, a quote with its PCK chain about 5 KiB, a certificate or CRL a few KiB; Intel's TCB
# info and QE identity JSON are tens of KiB, its PCK CRL can list many thousands of entries.
EVIDENCE_MAX_BYTES = 1 << 20
CERTIFICATE_MAX_BYTES = 1 << 20
COLLATERAL_MAX_BYTES = 16 << 20


def register(commands: Any) -> None:
    parser = commands.add_parser("evidence", help="inspect attestation evidence")
    sub = parser.add_subparsers(dest="evidence_command", metavar="COMMAND", required=True)
    verify = sub.add_parser(
        "verify",
        help="verify an SNP report or a TDX quote and print its claims",
        description=(
            "Verify an AMD SEV-SNP attestation report or an Intel TDX quote against the genuine"
            " AMD or Intel roots (or the emulated TEE's) and print the verdict and the claims."
            " Exits 0 only for valid evidence."
        ),
    )
    verify.add_argument("file", type=Path, help="the report (1184 bytes) or quote")
    verify.add_argument(
        "--format",
        choices=[platform.value for platform in tee.Tee],
        help="kind of evidence (default: detected from the bytes)",
    )
    verify.add_argument(
        "--cert",
        type=Path,
        action="append",
        default=[],
        metavar="DER_OR_PEM",
        help="SNP: the VCEK or VLEK (and optionally ASK/ARK, or an AMD CRL); repeatable",
    )
    verify.add_argument(
        "--collateral",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="TDX: TCB info, QE identity, CRLs or issuer chains, detected by content; repeatable",
    )
    verify.add_argument(
        "--product",
        choices=["Milan", "Genoa", "Turin"],
        help="SNP: the expected product (version 2 reports do not name it)",
    )
    verify.add_argument(
        "--at",
        type=_instant,
        metavar="ISO-8601",
        help="check certificate and collateral validity at this time instead of now",
    )
    verify.add_argument(
        "--emulated-roots",
        type=Path,
        metavar="STATE_DIR",
        help="trust the emulated TEE's roots in STATE_DIR instead of AMD's and Intel's",
    )
    verify.add_argument("--output", choices=["text", "json"], default="text")
    verify.set_defaults(run=run_verify)


def run_verify(arguments: argparse.Namespace) -> int:
    data = _read(arguments.file, "evidence", EVIDENCE_MAX_BYTES)
    now: datetime = arguments.at or datetime.now(UTC)
    platform = tee.Tee(arguments.format) if arguments.format else tee.detect_platform(data)
    state: Path | None = arguments.emulated_roots
    if platform is tee.Tee.SNP:
        verdict = verdicts.verify_snp(
            data,
            endorsements=[
                _read(path, "certificate", CERTIFICATE_MAX_BYTES) for path in arguments.cert
            ],
            now=now,
            product=arguments.product,
            **({"roots": verdicts.emulated_snp_roots(state)} if state else {}),
        )
    else:
        verdict = verdicts.verify_tdx(
            data,
            collateral=[
                _read(path, "collateral", COLLATERAL_MAX_BYTES) for path in arguments.collateral
            ],
            now=now,
            **({"roots": verdicts.emulated_tdx_roots(state)} if state else {}),
        )
    if arguments.output == "json":
        import json  # noqa: PLC0415 (only this output needs it)

        print(json.dumps(verdict.to_json(), indent=2))
    else:
        print(_render_text(verdict))
    return EXIT_VALID if verdict.valid else EXIT_INVALID


def _render_text(verdict: verdicts.Verdict) -> str:
    if not verdict.valid:
        return f"invalid ({verdict.reason}): {verdict.detail}"
    assert verdict.claims is not None
    lines = [f"valid {verdict.platform.name} evidence"]
    width = max(len(key) for key in verdict.claims)
    lines += [f"  {key:<{width}}  {_render_value(value)}" for key, value in verdict.claims.items()]
    return "\n".join(lines)


def _render_value(value: object) -> str:
    if isinstance(value, dict):
        return " ".join(f"{key}={_render_value(item)}" for key, item in value.items())
    if isinstance(value, list):
        return " ".join(_render_value(item) for item in value)
    return "-" if value is None else str(value)


def _instant(text: str) -> datetime:
    try:
        return parse_time(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


_HINTS = {
    "evidence": "pass the raw report or quote the guest produced",
    "certificate": "pass one DER or PEM certificate or CRL per --cert",
    "collateral": "pass one collateral document per --collateral",
}


def _read(path: Path, what: str, max_bytes: int) -> bytes:
    try:
        return read_bounded(path, max_bytes, what=f"the {what}", hint=_HINTS[what])
    except OSError as error:
        raise CliError(f"cannot read {what} {path}: {error.strerror}") from None
