"""What `set` sends is exactly the resources' policies, with generate's memo and cache present.

`set` reads the resources through generate's YAML memo, takes the hash of each annotation
generate wrote from its policy cache, writes the SetManifest request as wire bytes itself
(client/setrequest.py), inflates with zlib-ng and learns a written document's algorithm without
reading it whole (policy/initdata.py). None of these may change what reaches the Coordinator:
`verify` fetches the documents back and they are byte for byte the ones inside the annotations,
for a generated-size policy and one in a TOML form `to_toml` does not write. (A sha384 initdata
is left out: the Coordinator keys the documents it is sent by their sha256, not by their policy
hash, so it refuses one; the client's reading of it is in tests/policy/test_initdata.py.) A
resource edited by hand after `generate` (memo and cache then hold the old text) is read anew:
its policy is refused, never the old one sent.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from contrast.atls.issuers import TeeKind
from contrast.cli.main import main
from contrast.client.resources import yaml_files
from contrast.kuberesource import yamlio
from contrast.kuberesource.yamlmemo import FILE, YamlMemo
from contrast.local.workspace import DemoWorkload, emulated_reference_values, write_workspace
from contrast.policy.cache import PolicyCache
from contrast.policy.initdata import (
    ANNOTATION,
    Initdata,
    decode_annotation,
    encode_annotation,
    policy_hash,
)
from contrast.policy.settings import default_settings
from tests.cli.conftest import COORDINATOR, ROGUE, WEB, Cluster

ASSETS = Path(__file__).resolve().parents[2] / "src" / "contrast" / "policy" / "assets"
RULES = (ASSETS / "rules.rego").read_text() + (ASSETS / "settings.json").read_text()


class Sized(DemoWorkload):
    """A workload with the initdata given (a generated-size policy, another algorithm, ...)."""

    def __init__(self, name: str, toml: bytes) -> None:
        super().__init__(name)
        self.toml = toml

    def initdata(self) -> bytes:
        return self.toml


GENERATED = Sized("generated", Initdata({"policy.rego": RULES + "\n# generated\n"}).to_toml())
# Valid initdata in basic strings, which `to_toml` never writes: read by tomllib.
OTHER_FORM = Sized(
    "other-form",
    b'version = "0.1.0"\nalgorithm = "sha256"\n\n[data]\n"policy.rego" = "package y\\n"\n',
)
WORKLOADS = [COORDINATOR, WEB, GENERATED, OTHER_FORM]


def remember(workspace: Path) -> None:
    """generate's memo of the resources and its policy cache of their annotations (the hash of
    each by its sha256), as `generate` leaves them in the workspace."""
    memo = YamlMemo(workspace / FILE)
    for path in yaml_files(workspace / "resources"):
        yamlio.load(path, plain=True, memo=memo)
    memo.save()
    cache = PolicyCache(workspace / "policy-cache.json", "", default_settings(), [])
    for workload in WORKLOADS:
        key = hashlib.sha256(workload.name.encode()).hexdigest()  # generate's are its inputs'
        cache.store(key, encode_annotation(workload.initdata()), workload.policy_hash.hex())
    cache.save()


def contrast(cluster: Cluster, capsys: pytest.CaptureFixture[str], command: str) -> tuple[int, str]:
    workspace = cluster.workspace
    arguments = [command, "-c", cluster.user_api, "--workspace-dir", str(workspace)]
    if command == "set":
        arguments.append(str(workspace / "resources"))
    code = main(arguments)
    return code, capsys.readouterr().err


@pytest.fixture
def workspace(cluster: Cluster, tee_dir: Path) -> Path:
    """The cluster's workspace with the workloads above and generate's memo of them."""
    workspace = cluster.workspace  # its coordinator and web, rewritten with three more
    write_workspace(workspace, emulated_reference_values(TeeKind.EMULATED_SNP, tee_dir), WORKLOADS)
    remember(workspace)
    return workspace


def annotations(workspace: Path) -> dict[str, str]:
    found = {}
    for path in yaml_files(workspace / "resources"):
        document = YAML(typ="safe").load(path.read_text())  # ruamel's own reading
        found[path.stem] = document["metadata"]["annotations"][ANNOTATION]
    return found


def test_the_coordinator_holds_the_resources_policies_byte_for_byte(
    cluster: Cluster, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert len(GENERATED.toml) > 50_000  # lengths of three varint bytes on the wire
    code, err = contrast(cluster, capsys, "set")
    assert code == 0, err
    code, err = contrast(cluster, capsys, "verify")
    assert code == 0, err
    expected = {
        policy_hash(toml).hex(): toml
        for toml in map(decode_annotation, annotations(workspace).values())
    }
    assert set(expected) == {w.policy_hash.hex() for w in WORKLOADS}
    fetched = {
        path.name.removeprefix("initdata.").removesuffix(".toml"): path.read_bytes()
        for path in (workspace / "verify").glob("initdata.*.toml")
    }
    assert fetched == expected


def test_a_resource_edited_after_generate_is_refused_not_sent(
    cluster: Cluster, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    web = workspace / "resources" / "web.yml"
    # The memo knows web.yml's old text; the user pastes another pod's policy into it by hand.
    found = annotations(workspace)
    web.write_text(web.read_text().replace(found["web"], found["generated"]))
    (workspace / "resources" / "rogue.yml").write_text(ROGUE.pod_yaml())
    code, err = contrast(cluster, capsys, "set")
    assert code == 1
    assert f"the manifest lists policy {WEB.policy_hash.hex()}, but no resource" in err
    assert not (workspace / "seed-shares.json").exists()  # nothing was set
    web.write_text(WEB.pod_yaml())  # web's own again: only the rogue pod is left over
    code, err = contrast(cluster, capsys, "set")
    assert code == 1
    assert f"has policy {ROGUE.policy_hash.hex()}, which the manifest lacks" in err
    assert not (workspace / "seed-shares.json").exists()


def test_the_same_policy_compressed_anew_is_the_same_policy(
    cluster: Cluster, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Another annotation text (gzip level 1, a file name in the header) for the same TOML.
    path = workspace / "resources" / "generated.yml"
    old = annotations(workspace)["generated"]
    new = base64.b64encode(gzip.compress(GENERATED.toml, compresslevel=1, mtime=7)).decode()
    assert new != old
    path.write_text(path.read_text().replace(old, new))
    assert contrast(cluster, capsys, "set") == (0, "")
    assert contrast(cluster, capsys, "verify")[0] == 0
    fetched = workspace / "verify" / f"initdata.{GENERATED.policy_hash.hex()}.toml"
    assert fetched.read_bytes() == GENERATED.toml
