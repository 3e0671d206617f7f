"""`contrast verify` at 10 000 workloads: one sync for everything it writes, warnings from memory.

Through the real gRPC client and server: the Coordinator holds a manifest of 10 000 policies and
one debug-enabled `web`. `verify` writes every initdata file, each atomic, with one `syncfs`
before the renames (an audit hook sees the order: every temporary created before it, every rename
after it, `verify/`'s head last), and warns for `web` alone, from the documents it received.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from contrast.atls.identity import TlsIdentity
from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.client import operations
from contrast.client.workspace import Workspace
from contrast.coordinator.core import utc_now
from contrast.coordinator.server import CoordinatorServer, Ports
from contrast.history.history import digest
from contrast.policy.initdata import INSECURE_DEBUG_ENTRY, Initdata
from tests import fileevents
from tests.coordinator.conftest import Deployment, policy, policy_hash
from tests.coordinator.crash_step_worker import LARGE, large_policy

NAMES = ("coordinator", "web", *LARGE)


@pytest.fixture
def events() -> Iterator[list[tuple[str, str]]]:
    yield from fileevents.recording()


def test_verify_of_10000_policies_syncs_once_and_warns_for_the_debug_policy(
    tmp_path: Path, events: list[tuple[str, str]]
) -> None:
    debug = Initdata({INSECURE_DEBUG_ENTRY: "true", "policy.rego": "package agent_policy\n"})
    deployment = Deployment(
        tee=EmulatedSnp(tmp_path / "tee"),
        owner=ec.generate_private_key(ec.SECP384R1()),
        seedshare=rsa.generate_private_key(65537, 2048),
        policies={"coordinator": policy("coordinator"), "web": debug.to_toml()}
        | {name: large_policy(name) for name in LARGE},
        state_dir=tmp_path / "state",
    )
    coordinator = deployment.coordinator()
    manifest = deployment.manifest(NAMES)
    coordinator.set_manifest(manifest, deployment.documents(NAMES))
    workspace = Workspace(tmp_path / "workspace")
    workspace.root.mkdir()
    (workspace.root / "manifest.json").write_bytes(manifest)
    server = CoordinatorServer(
        coordinator,
        deployment.issuer("coordinator"),
        TlsIdentity.generate(now=utc_now()),
        host="127.0.0.1",
        ports=Ports(0, 0, 0),
    )
    server.start()
    try:
        target = operations.Target(
            f"127.0.0.1:{server.ports.user_api}", workspace.path("manifest.json"), timeout=300
        )
        events.clear()
        result = operations.verify(target, workspace)
    finally:
        server.stop(grace=0)

    verify = workspace.verify_dir
    written = {path.name: path.read_bytes() for path in verify.glob("initdata.*.toml")}
    assert written == {
        f"initdata.{digest(document).hex()}.toml": document
        for document in deployment.documents(NAMES)
    }
    assert (verify / "manifest.0.json").read_bytes() == manifest
    web = policy_hash(deployment.policies["web"]).hex()
    assert result.debug_warnings == (
        f"INSECURE: policy {web[:16]}… (core/v1/Pod/default/web) enables the debug shell:"
        " whoever can exec into that pod has a shell in its confidential VM",
    )

    kinds = [kind for kind, _ in events]
    assert kinds.count("syncfs") == 1
    sync = kinds.index("syncfs")
    temporaries = [
        i
        for i, (kind, path) in enumerate(events)
        if kind == "open" and Path(path).name.startswith(".initdata.")
    ]
    renames = [i for i, kind in enumerate(kinds) if kind == "rename"]
    batch = [i for i in renames if Path(events[i][1]).name.startswith("initdata.")]
    assert len(batch) == len(NAMES)
    assert len(temporaries) == len(NAMES)
    assert max(temporaries) < sync < min(batch)
    heads = [i for i in renames if events[i][1] == str(verify / "latest-transition")]
    assert len(heads) == 1
    assert heads[0] > max(batch), "verify/'s head before the files it vouches for"
