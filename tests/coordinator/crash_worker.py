"""Sets manifests in a loop until killed: the victim of test_crash.py's kill -9.

Usage: python -m tests.coordinator.crash_worker STATE_DIR TEE_DIR KEYS_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.coordinator.core import Mode
from contrast.files import write_atomically
from contrast.seed.shares import SeedShareDocument
from tests.coordinator.conftest import Deployment, policy

NAMES = ("coordinator", "web", "client", "rogue")


def main(state_dir: Path, tee_dir: Path, keys: Path) -> None:
    owner = serialization.load_pem_private_key((keys / "owner.pem").read_bytes(), None)
    seedshare = serialization.load_pem_private_key((keys / "seedshare.pem").read_bytes(), None)
    assert isinstance(owner, ec.EllipticCurvePrivateKey)
    assert isinstance(seedshare, rsa.RSAPrivateKey)
    deployment = Deployment(
        EmulatedSnp(tee_dir), owner, seedshare, {n: policy(n) for n in NAMES}, state_dir
    )
    coordinator = deployment.coordinator()
    shares_file = keys / "seed-shares.json"
    if coordinator.mode is Mode.RECOVERY:
        document = SeedShareDocument.from_json(shares_file.read_bytes())
        coordinator.recover(document.decrypt(seedshare), document.salt)
    else:
        result = coordinator.set_manifest(deployment.manifest(), deployment.documents())
        assert result.seed_shares is not None
        write_atomically(shares_file, result.seed_shares.to_json(), mode=0o600)
    round_number = 0
    while True:
        round_number += 1
        names = ("coordinator", "web") if round_number % 2 else ("coordinator", "web", "client")
        deployment.update(coordinator, names)
        print(round_number, flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
