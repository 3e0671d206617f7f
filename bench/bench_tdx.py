"""TDX verification cost against its floor: raw P-256 ECDSA checks with `cryptography`.

A quote needs two signature checks that cannot be cached: the attestation key's over header ‖
body, and the PCK's over the QE report. The baseline is one raw P-256 verify of the quote
signature (key already loaded), measured in the same run; the floor is two of them. With the
PCK chain cache warm, `verify_quote_bytes` should stay within 1.3 × that floor. Also shown: the
same with Intel collateral (TCB info, QE identity, CRLs) checked on every call.

Run: `.venv/bin/python bench/bench_tdx.py [iterations]` (needs ../shared/testdata).
"""

from __future__ import annotations

import sys
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from contrast.attestation.certificates import parse_time
from contrast.attestation.tdx.collateral import load_collateral
from contrast.attestation.tdx.quote import Quote
from contrast.attestation.tdx.trust import GENUINE_INTEL_ROOTS
from contrast.attestation.tdx.verify import verify_quote_bytes
from timing import best_per_call  # bench/timing.py, beside this script

DATA = Path(__file__).resolve().parents[2] / "shared" / "testdata" / "attestation"
VECTOR = DATA / "tdx" / "phala-b0c06f-v4"
COLLATERAL = DATA / "collateral" / "intel" / "phala-2025-06"
VALID_AT = "2025-06-20T00:00:00Z"
GOAL = 1.3


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    iterations = int(arguments[0]) if arguments else 300
    if not VECTOR.is_dir():
        print(f"test data not found at {DATA}", file=sys.stderr)
        return 1
    data = (VECTOR / "quote.bin").read_bytes()
    now = parse_time(VALID_AT)
    collateral = load_collateral(
        [
            (COLLATERAL / name).read_bytes()
            for name in ("tcb_info.json", "qe_identity.json", "pck_crl_platform.der")
        ]
    )
    quote = Quote.from_bytes(data)
    public_key = ec.EllipticCurvePublicKey.from_encoded_point(
        ec.SECP256R1(), b"\x04" + quote.signature_data.attestation_key
    )
    raw_signature = quote.signature_data.signature
    signature = encode_dss_signature(
        int.from_bytes(raw_signature[:32], "big"), int.from_bytes(raw_signature[32:], "big")
    )
    signed = quote.signed_bytes

    def baseline() -> None:
        public_key.verify(signature, signed, ec.ECDSA(hashes.SHA256()))

    def full() -> None:
        verify_quote_bytes(data, now=now, roots=GENUINE_INTEL_ROOTS)

    def with_collateral() -> None:
        verify_quote_bytes(data, now=now, roots=GENUINE_INTEL_ROOTS, collateral=collateral)

    with_collateral()  # warm the caches: steady state is what a Coordinator sees
    raw = best_per_call(baseline, iterations)
    verified = best_per_call(full, iterations)
    checked = best_per_call(with_collateral, iterations)
    floor = 2 * raw
    print(f"raw P-256 ECDSA verify (baseline)     {raw * 1e6:9.1f} us")
    print(f"floor: two raw verifies               {floor * 1e6:9.1f} us")
    print(f"verify_quote_bytes (chain cached)     {verified * 1e6:9.1f} us")
    print(f"  with collateral                     {checked * 1e6:9.1f} us")
    print(f"ratio to the floor                    {verified / floor:9.2f}  (goal <= {GOAL})")
    print(f"ratio to the floor, with collateral   {checked / floor:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
