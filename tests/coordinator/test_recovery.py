"""Recovery refuses damaged state and malformed seeds with typed errors, naming what is wrong.

The Coordinator leaves recovery mode only with a history it can serve: every manifest, policy
document and transition the signed head reaches is present and hashes to its name.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from contrast.coordinator.core import Coordinator, Mode
from contrast.coordinator.errors import InvalidRequest, StoredStateDamaged
from contrast.history.history import digest
from contrast.seed.engine import MAXIMUM_SEED_SIZE, SeedEngine
from contrast.seed.errors import SeedError
from tests.coordinator.conftest import Deployment


def set_first(deployment: Deployment) -> tuple[bytes, bytes]:
    """Set the first manifest; the seed and salt its seed share owner gets back."""
    result = deployment.coordinator().set_manifest(deployment.manifest(), deployment.documents())
    assert result.seed_shares is not None
    return result.seed_shares.decrypt(deployment.seedshare), result.seed_shares.salt


def restarted(deployment: Deployment) -> Coordinator:
    coordinator = deployment.coordinator()
    assert coordinator.mode is Mode.RECOVERY
    return coordinator


def test_the_seed_may_be_as_long_as_hkdf_sha256_can_expand() -> None:
    assert MAXIMUM_SEED_SIZE == 255 * 32
    SeedEngine(b"s" * MAXIMUM_SEED_SIZE, b"s" * 32)
    with pytest.raises(SeedError, match=f"at most {MAXIMUM_SEED_SIZE} bytes .*, got 8161"):
        SeedEngine(b"s" * (MAXIMUM_SEED_SIZE + 1), b"s" * 32)


def test_recover_with_a_seed_longer_than_the_key_derivation_allows_is_invalid(
    deployment: Deployment,
) -> None:
    _, salt = set_first(deployment)
    coordinator = restarted(deployment)
    with pytest.raises(InvalidRequest, match="at most 8160 bytes"):
        coordinator.recover(b"s" * 100_000, salt)
    assert coordinator.mode is Mode.RECOVERY


@pytest.mark.parametrize("length", [0, 20, 32, 40, 70])
def test_a_truncated_history_head_is_named(deployment: Deployment, length: int) -> None:
    seed, salt = set_first(deployment)
    head = deployment.state_dir / "transitions" / "latest"
    head.write_bytes(head.read_bytes()[:length])
    coordinator = restarted(deployment)
    with pytest.raises(StoredStateDamaged, match="transitions/latest"):
        coordinator.recover(seed, salt)
    assert coordinator.mode is Mode.RECOVERY


def active_policy_entry(deployment: Deployment, kind: str) -> Path:
    """The stored entry of `kind` that holds (or leads to) the active manifest's policies."""
    (pointer,) = [
        path
        for path in (deployment.state_dir / "policysets").iterdir()
        if path.name == digest(deployment.manifest(("coordinator", "web"))).hex()
    ]
    if kind == "policysets":
        return pointer
    index = deployment.state_dir / "policyindexes" / pointer.read_bytes().hex()
    if kind == "policyindexes":
        return index
    (pack,) = (deployment.state_dir / "packs").iterdir()
    return pack


@pytest.mark.parametrize("damage", ["deleted", "flipped", "truncated"])
@pytest.mark.parametrize("kind", ["packs", "policyindexes", "policysets"])
def test_recover_refuses_a_damaged_policy_entry_naming_it(
    deployment: Deployment, damage: str, kind: str
) -> None:
    coordinator = deployment.coordinator()
    result = coordinator.set_manifest(
        deployment.manifest(("coordinator", "web", "client")),
        deployment.documents(("coordinator", "web", "client")),
    )
    assert result.seed_shares is not None
    # The update keeps the first manifest's pack (two of its three documents are still used).
    deployment.update(coordinator, ("coordinator", "web"))
    path = active_policy_entry(deployment, kind)
    if damage == "deleted":
        path.unlink()
    elif damage == "flipped":
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
    else:
        path.write_bytes(path.read_bytes()[:10])
    restart = restarted(deployment)
    seed = result.seed_shares.decrypt(deployment.seedshare)
    # A deleted pointer leaves the documents to be looked up one by one (the layout before
    # packs), and none is there.
    named = "policies/" if (kind, damage) == ("policysets", "deleted") else path.name
    with pytest.raises(StoredStateDamaged) as refused:
        restart.recover(seed, result.seed_shares.salt)
    if (kind, damage) != ("policysets", "flipped"):  # a flipped pointer names its target
        assert named in refused.value.explain()
    assert restart.mode is Mode.RECOVERY


def test_recovered_coordinator_serves_its_history(deployment: Deployment) -> None:
    seed, salt = set_first(deployment)
    coordinator = restarted(deployment)
    coordinator.recover(seed, salt)
    history = coordinator.get_manifests()
    assert sorted(history.policies) == sorted(deployment.documents())
