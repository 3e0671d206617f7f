"""SNP verification cost against its floor: one raw P-384 ECDSA check of the report signature.

Full `verify_evidence` also parses the report, reads the VCEK's AMD extensions and checks the
chain ARK → ASK → VCEK; with the chain cache warm, all of that should add little to the one
signature check that cannot be cached. Prints the timings and the ratios (goals: ≤ 1.3, and
≤ 1.15 from bytes as the Coordinator gets them); the ratio is the median over many short
rounds (`timing.median_ratios`), which one run to the next agrees on within about 0.01.

Run: `.venv/bin/python bench/bench_snp.py [iterations]`.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from contrast.attestation.certificates import load_certificate, split_endorsements
from contrast.attestation.snp.report import SIGNED_SIZE, Report
from contrast.attestation.snp.trust import GENUINE_AMD_ROOTS
from contrast.attestation.snp.verify import verify_evidence
from timing import best_interleaved, median_ratios  # bench/timing.py, beside this script

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "evidence" / "snp-milan-oak"
GOAL = 1.3
GOAL_FROM_BYTES = 1.15


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    iterations = int(arguments[0]) if arguments else 2000  # 500 varied by ±0.1 on a noisy host
    report = (EXAMPLE / "report.bin").read_bytes()
    vcek = load_certificate((EXAMPLE / "vcek.der").read_bytes(), what="example VCEK")
    now = vcek.not_valid_before_utc + timedelta(days=1)
    parsed = Report.from_bytes(report)
    public_key = vcek.public_key()
    assert isinstance(public_key, ec.EllipticCurvePublicKey)
    signature = encode_dss_signature(parsed.signature_r, parsed.signature_s)
    signed = report[:SIGNED_SIZE]

    def baseline() -> None:
        public_key.verify(signature, signed, ec.ECDSA(hashes.SHA384()))

    def full() -> None:
        verify_evidence(report, [vcek], now=now, roots=GENUINE_AMD_ROOTS)

    vcek_bytes = (EXAMPLE / "vcek.der").read_bytes()

    def from_bytes() -> None:  # what the Coordinator and `contrast evidence verify` do
        chain, crl = split_endorsements([vcek_bytes], what="the VCEK")
        verify_evidence(report, chain, now=now, roots=GENUINE_AMD_ROOTS, crl=crl)

    full()  # warm the chain cache: steady state is what a Coordinator sees
    from_bytes()
    functions = {"raw": baseline, "full": full, "from_bytes": from_bytes}
    best = best_interleaved(functions, max(1, iterations // 5))
    ratio = median_ratios(functions, "raw", 10, rounds=max(1, iterations // 10))
    raw, verified, from_wire = best["raw"], best["full"], best["from_bytes"]
    print(f"raw P-384 ECDSA verify      {raw * 1e6:9.1f} us  (best loop)")
    print(f"verify_evidence (cached)    {verified * 1e6:9.1f} us  (best loop)")
    print(f"from bytes (VCEK as sent)   {from_wire * 1e6:9.1f} us  (best loop)")
    print("ratios: median over rounds of 10 calls each (stable); best loops' ratio beside")
    print(f"verify_evidence (cached)    {ratio['full']:9.2f}  (best loops {verified / raw:.2f};"
          f" goal <= {GOAL})")  # fmt: skip
    print(f"from bytes (VCEK as sent)   {ratio['from_bytes']:9.2f}  (best loops"
          f" {from_wire / raw:.2f}; goal <= {GOAL_FROM_BYTES})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
