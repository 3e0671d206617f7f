"""Random and damaged inputs to every command end in a result or one readable line (issue 11).

Each test starts from inputs that work (a generated workspace, a set manifest, real evidence)
and damages one of them with `tests.cli.mutations`: text edits, byte edits, a node of the
document replaced. Whatever the command makes of it, it must not end in "internal error" or a
traceback, and when it fails it must leave every file as it was. (The layer cache is the one
exception: `generate` saves what it learned about images even when a later step fails.)

Examples are derandomized and use no example database, so CI runs the same cases every time;
their number is kept small enough for a few seconds per command.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from contrast.atls.identity import TlsIdentity
from contrast.atls.issuers import EmulatedSnpIssuer, TeeKind
from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.cli.main import main
from contrast.coordinator.core import Coordinator, utc_now
from contrast.coordinator.server import CoordinatorServer, Ports
from contrast.history.history import History
from contrast.history.store import FileSystemStore
from contrast.local.workspace import emulated_reference_values, write_workspace
from contrast.manifest.verifier import workload_verifier
from contrast.nodeinstaller.standins import write_standins
from contrast.platforms import PLATFORMS, by_name
from contrast.policy.initdata import ANNOTATION, Initdata, decode_annotation
from tests.cli.conftest import COORDINATOR, WEB
from tests.cli.mutations import (
    ARGUMENT,
    JSON_VALUES,
    TEXT,
    mutated_bytes,
    mutated_text,
    mutated_tree,
)
from tests.conftest import ATTESTATION_DATA, load_vectors
from tests.generate.conftest import GenerateWorkspace, reference_values_file, write_layout
from tests.manifest.test_defaults import KERNEL, OVMF, _tdx_firmware
from tests.nodeinstaller.test_containerdconfig import V2_USER_CONFIG

# CONTRAST_FUZZ_EXAMPLES=N explores N random examples per test instead (for a long local run).
EXPLORE = int(os.environ.get("CONTRAST_FUZZ_EXAMPLES", "0"))
EXAMPLES = 25
USAGE = 2
LOG_LEVELS = ("DEBUG ", "INFO ", "WARNING ", "ERROR ", "CRITICAL ")


def examples(count: int = EXAMPLES) -> Callable[[Any], Any]:
    return settings(
        max_examples=EXPLORE or count,
        derandomize=not EXPLORE,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str


def invoke(argv: Sequence[str]) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exit_:  # argparse refusing a flag: a usage line, exit 2
            code = exit_.code if isinstance(exit_.code, int) else 2
    return Outcome(code, out.getvalue(), err.getvalue())


def snapshot(root: Path, ignore: Sequence[str] = ()) -> dict[str, tuple[int, bytes]]:
    return {
        str(path.relative_to(root)): (path.stat().st_mode, path.read_bytes())
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name not in ignore
    }


def check(argv: Sequence[str], root: Path, ignore: Sequence[str] = ()) -> Outcome:
    """Run the command; assert a deliberate ending, and no change to `root` on failure."""
    before = snapshot(root, ignore)
    outcome = invoke(argv)
    last = outcome.err.splitlines()[-1][:70] if outcome.err.strip() else ""
    event(f"exit {outcome.code} {last}")
    assert "contrast: internal error" not in outcome.err, outcome.err
    assert "Traceback" not in outcome.err, outcome.err
    if outcome.code != 0:
        # Log records (a warning about an unreadable cache) may come first; then one line.
        lines = [line for line in outcome.err.splitlines() if not line.startswith(LOG_LEVELS)]
        if outcome.code == USAGE:  # argparse: its usage lines, then one line naming the flag
            assert lines[-1].startswith("contrast "), outcome.err
            assert ": error: " in lines[-1], outcome.err
            assert all(line.startswith(("usage: ", " ")) for line in lines[:-1]), outcome.err
        elif lines:  # (no lines: a verdict on stdout, as evidence verify and policy evaluate give)
            assert len(lines) == 1, outcome.err
            assert lines[0].startswith("contrast: "), outcome.err
        assert snapshot(root, ignore) == before, f"a failing command changed files: {argv}"
    return outcome


@contextlib.contextmanager
def copy_of(template: Path) -> Iterator[Path]:
    """A scratch copy of a prepared directory, for one example."""
    with tempfile.TemporaryDirectory(prefix="contrast-fuzz-") as scratch:
        target = Path(scratch) / template.name
        shutil.copytree(template, target, symlinks=True)
        yield target


def _yaml_documents(text: str) -> list[Any]:
    return [document for document in YAML(typ="safe").load_all(text) if document is not None]


def _yaml_text(documents: list[Any]) -> str:
    buffer = io.StringIO()
    YAML(typ="safe").dump_all(documents, buffer)
    return buffer.getvalue()


# --- generate -----------------------------------------------------------------------------------

EMULATED = ("--reference-values", "emulated-snp")
CONTRAST_ANNOTATIONS = [
    f"contrast.edgeless.systems/{name}"
    for name in (
        "servicemesh-ingress",
        "servicemesh-egress",
        "servicemesh-admin-interface-port",
        "skip-initializer",
        "workload-secret-id",
        "pod-role",
    )
]


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> GenerateWorkspace:
    """A workspace after one successful `generate` (keys, manifest, warm layer cache)."""
    root = tmp_path_factory.mktemp("generate")
    workspace = GenerateWorkspace(
        root / "workspace",
        write_layout(root / "layout"),
        reference_values_file(root / "reference-values.json"),
    )
    workspace.add_example("sidecar-tls")
    workspace.add_coordinator("emulated-snp")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert workspace.generate(*EMULATED, str(workspace.resources)) == 0
    return workspace


def _generate(workspace: GenerateWorkspace, root: Path) -> Outcome:
    argv = [
        "generate",
        "--workspace-dir", str(root),
        "--oci-layout", str(workspace.layout),
        "--reference-values-file", str(workspace.reference_values),
        *EMULATED,
        str(root / "resources"),
    ]  # fmt: skip
    return check(argv, root, ignore=["layers-cache.json"])


@examples()
@given(data=st.data())
def test_generate_with_damaged_resources(generated: GenerateWorkspace, data: st.DataObject) -> None:
    text = (generated.resources / "app.yml").read_text()
    damaged = data.draw(
        mutated_text(text) | mutated_tree(_yaml_documents(text), max_edits=3).map(_yaml_text)
    )
    with copy_of(generated.root) as root:
        (root / "resources" / "app.yml").write_text(damaged)
        _generate(generated, root)


@examples()
@given(
    name=st.sampled_from(CONTRAST_ANNOTATIONS),
    value=TEXT | JSON_VALUES.map(json.dumps),
    on_workload=st.booleans(),
)
def test_generate_with_random_contrast_annotations(
    generated: GenerateWorkspace, name: str, value: str, on_workload: bool
) -> None:
    documents = _yaml_documents((generated.resources / "app.yml").read_text())
    for document in documents:
        metadata = document["metadata"] if on_workload else document["spec"]["template"]["metadata"]
        metadata.setdefault("annotations", {})[name] = value
    with copy_of(generated.root) as root:
        (root / "resources" / "app.yml").write_text(_yaml_text(documents))
        _generate(generated, root)


WORKSPACE_FILES = [
    "manifest.json",
    "settings.json",
    "rules.rego",
    "layers-cache.json",
    "policy-cache.json",
    "schema-cache.json",
]


@examples()
@given(name=st.sampled_from(WORKSPACE_FILES), data=st.data())
def test_generate_with_damaged_workspace_files(
    generated: GenerateWorkspace, name: str, data: st.DataObject
) -> None:
    text = (generated.root / name).read_text()
    strategy = mutated_text(text)
    if name.endswith(".json"):
        strategy |= mutated_tree(json.loads(text)).map(json.dumps)
    damaged = data.draw(strategy)
    with copy_of(generated.root) as root:
        (root / name).write_text(damaged)
        _generate(generated, root)


# --- policy evaluate / explain -----------------------------------------------------------------

KATA = ATTESTATION_DATA.parent / "kata-policy"


@pytest.fixture(scope="module")
def policy_inputs(generated: GenerateWorkspace) -> dict[str, str]:
    """A policy as Rego, as initdata TOML and as annotated YAML, and a request that it allows."""
    app = generated.documents("app.yml")[0]
    annotation = app["spec"]["template"]["metadata"]["annotations"][ANNOTATION]
    toml = decode_annotation(annotation)
    policy = Initdata.from_toml(toml).policy
    assert policy is not None
    request = {"kind": "CreateSandboxRequest", "request": {"hostname": "", "dns": []}}
    return {
        "rego": policy,
        "toml": toml.decode(),
        "yaml": (generated.resources / "app.yml").read_text(),
        "request": json.dumps(request),
    }


@examples()
@given(
    command=st.sampled_from(["evaluate", "explain"]),
    form=st.sampled_from(["rego", "toml", "yaml"]),
    damage=st.sampled_from(["policy", "request"]),
    name=st.none() | st.sampled_from(["CreateContainerRequest", "ExecProcessRequest", "Nope"]),
    data=st.data(),
)
def test_policy_commands_with_damaged_inputs(
    policy_inputs: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
    *,
    command: str,
    form: str,
    damage: str,
    name: str | None,
    data: st.DataObject,
) -> None:
    policy, request = policy_inputs[form], policy_inputs["request"]
    if damage == "policy":
        policy = data.draw(mutated_text(policy))
    else:
        request = data.draw(
            mutated_text(request) | mutated_tree(json.loads(request)).map(json.dumps)
        )
    root = tmp_path_factory.mktemp("policy")
    (root / "policy").write_text(policy)
    (root / "request.json").write_text(request)
    argv = [
        "policy",
        command,
        "--policy",
        str(root / "policy"),
        "--request",
        str(root / "request.json"),
    ]
    if name is not None:
        argv += ["--name", name]
    check(argv, root)


# --- set / verify / recover --------------------------------------------------------------------


@dataclass
class LiveCoordinator:
    workspace: Path
    address: str


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCoordinator]:
    """A Coordinator on loopback, with the workspace's first manifest set."""
    root = tmp_path_factory.mktemp("userapi")
    tee_dir = root / "tee"
    EmulatedSnp(tee_dir)
    workspace = root / "workspace"
    write_workspace(
        workspace, emulated_reference_values(TeeKind.EMULATED_SNP, tee_dir), [COORDINATOR, WEB]
    )
    coordinator = Coordinator(
        History(FileSystemStore(root / "state")), verifier_for=workload_verifier
    )
    server = CoordinatorServer(
        coordinator,
        EmulatedSnpIssuer(EmulatedSnp(tee_dir), COORDINATOR.policy_hash),
        TlsIdentity.generate(now=utc_now()),
        host="127.0.0.1",
        ports=Ports(0, 0, 0),
    )
    server.start()
    try:
        address = f"127.0.0.1:{server.ports.user_api}"
        setup = invoke(
            ["set", "-c", address, "--workspace-dir", str(workspace), str(workspace / "resources")]
        )
        assert setup.code == 0, setup.err
        yield LiveCoordinator(workspace, address)
    finally:
        server.stop(grace=0)


USER_API_FILES = ["manifest.json", "seed-shares.json", "latest-transition", "resources/web.yml",
                  "workload-owner.pem", "seedshare-owner.pem"]  # fmt: skip


@examples(30)
@given(
    command=st.sampled_from(["set", "verify", "recover"]),
    name=st.sampled_from(USER_API_FILES),
    data=st.data(),
)
def test_user_api_commands_with_damaged_workspace_files(
    live: LiveCoordinator, command: str, name: str, data: st.DataObject
) -> None:
    with copy_of(live.workspace) as root:
        path = root / name
        text = path.read_text()
        strategy = mutated_text(text)
        if name.endswith(".json"):
            strategy |= mutated_tree(json.loads(text)).map(lambda tree: json.dumps(tree, indent=2))
        path.write_text(data.draw(strategy))
        argv = [command, "-c", live.address, "--workspace-dir", str(root), "--timeout", "10"]
        if command == "set":
            argv.append(str(root / "resources"))
        check(argv, root)


@examples()
@given(
    command=st.sampled_from(["set", "verify", "recover"]),
    flag=st.sampled_from(["--coordinator-policy-hash", "--timeout", "-c", "--manifest"]),
    value=ARGUMENT,
)
def test_user_api_commands_with_random_flags(
    live: LiveCoordinator, command: str, flag: str, value: str
) -> None:
    with copy_of(live.workspace) as root:
        argv = [command, "-c", "127.0.0.1:1", "--workspace-dir", str(root), flag, value]
        if command == "set":
            argv.append(str(root / "resources"))
        check(argv, root)


# --- evidence verify ---------------------------------------------------------------------------

SNP = [v for v in load_vectors("snp") if {"report", "vcek"} <= set(v.expected["files"])]
TDX = [v for v in load_vectors("tdx") if "quote" in v.expected["files"]]


GOLDEN_TDX = ATTESTATION_DATA / "tdx" / "gtg-cos-113-ccel-v4"
COLLATERAL = ("tcb_info", "qe_identity", "tcb_signing_chain", "pck_crl", "root_ca_crl")


def _tdx_collateral(vector: Any) -> list[Path]:
    """The collateral files of a vector, as tests/cli/test_evidence.py passes them."""
    collateral = vector.expected.get("collateral") or {}
    paths = []
    for key in COLLATERAL:
        if key in collateral:
            local = vector.path / Path(collateral[key]).name
            paths.append(
                local
                if key == "tcb_info" and local.exists()
                else ATTESTATION_DATA / collateral[key]
            )
    return paths


def _damaged_certificate(data: bytes) -> st.SearchStrategy[bytes]:
    """DER damaged as bytes, or as PEM text."""
    pem = (
        b"-----BEGIN CERTIFICATE-----\n" + base64.encodebytes(data) + b"-----END CERTIFICATE-----\n"
    )
    return mutated_bytes(data) | mutated_text(pem.decode()).map(str.encode)


def _damaged_collateral(data: bytes) -> st.SearchStrategy[bytes]:
    try:
        tree = json.loads(data)
    except ValueError:
        return mutated_bytes(data) | mutated_text(data.decode("latin-1")).map(str.encode)
    return mutated_tree(tree).map(lambda t: json.dumps(t).encode()) | mutated_bytes(data)


@pytest.mark.skipif(not SNP or not TDX, reason="the attestation vectors in ../shared are missing")
@examples(40)
@given(
    platform=st.sampled_from(["snp", "tdx"]),
    index=st.integers(0, 100),
    part=st.sampled_from(["evidence", "endorsement", "at"]),
    data=st.data(),
)
def test_evidence_verify_with_damaged_evidence_and_endorsements(
    tmp_path_factory: pytest.TempPathFactory,
    platform: str,
    index: int,
    part: str,
    data: st.DataObject,
) -> None:
    root = tmp_path_factory.mktemp("evidence")
    at: str = "2025-06-01T00:00:00Z"
    if platform == "snp":
        vector = SNP[index % len(SNP)]
        evidence = vector.file("report")
        endorsements = [vector.file("vcek")]
        at = vector.expected.get("valid_at", at)
    else:
        vector = TDX[index % len(TDX)]
        evidence = vector.file("quote")
        endorsements = [path.read_bytes() for path in _tdx_collateral(vector)]
        at = vector.expected.get("valid_at", at)
    if part == "evidence":
        evidence = data.draw(mutated_bytes(evidence))
    elif part == "endorsement" and endorsements:
        which = data.draw(st.integers(0, len(endorsements) - 1))
        damage = _damaged_certificate if platform == "snp" else _damaged_collateral
        endorsements[which] = data.draw(damage(endorsements[which]))
    else:
        at = data.draw(mutated_text(at)).replace("\x00", "")  # an argument: no NUL
    (root / "evidence.bin").write_bytes(evidence)
    flag = "--cert" if platform == "snp" else "--collateral"
    argv = ["evidence", "verify", str(root / "evidence.bin"), "--format", platform, "--at", at]
    for number, endorsement in enumerate(endorsements):
        (root / f"endorsement-{number}").write_bytes(endorsement)
        argv += [flag, str(root / f"endorsement-{number}")]
    outcome = check([*argv, "--output", "json"], root)
    if outcome.code in (0, 1) and outcome.out:
        verdict = json.loads(outcome.out)
        assert (outcome.code == 0) == (verdict["verdict"] == "valid")


# --- runtime, coordinator-resources, runtime reference-values, node-installer -----------------

PLATFORM_NAMES = [platform.name for platform in PLATFORMS]


@examples()
@given(
    platform=st.sampled_from(PLATFORM_NAMES).map(str.upper) | ARGUMENT,
    selectors=st.lists(ARGUMENT | st.builds("{}={}".format, ARGUMENT, ARGUMENT), max_size=3),
    command=st.sampled_from(["runtime", "coordinator-resources"]),
)
def test_release_resources_with_random_flags(
    tmp_path_factory: pytest.TempPathFactory, platform: str, selectors: list[str], command: str
) -> None:
    argv = [command, "--platform", platform]
    if command == "runtime":
        for selector in selectors:
            argv += ["--node-selector", selector]
    check(argv, tmp_path_factory.mktemp("release"))


REPLACEMENTS = (
    "# a mirror\n"
    "ghcr.io/contrast-python/coordinator:0.1.0 = mirror.example/coordinator:0.1.0\n"
    "registry.k8s.io/pause:3.10=mirror.example/pause:3.10  # the pause image\n"
)


@examples()
@given(
    command=st.sampled_from(["runtime", "coordinator-resources"]),
    data=st.data(),
)
def test_release_resources_with_damaged_image_replacements(
    tmp_path_factory: pytest.TempPathFactory, command: str, data: st.DataObject
) -> None:
    root = tmp_path_factory.mktemp("replacements")
    (root / "replacements.txt").write_text(data.draw(mutated_text(REPLACEMENTS)))
    argv = [command, "--platform", "metal-qemu-snp"]
    check([*argv, "--image-replacements", str(root / "replacements.txt")], root)


@examples()
@given(
    tee=st.sampled_from(["snp", "tdx"]),
    part=st.sampled_from(["firmware", "kernel", "event log", "rtmr0", "vcpus"]),
    data=st.data(),
)
def test_reference_values_with_damaged_images(
    tmp_path_factory: pytest.TempPathFactory, tee: str, part: str, data: st.DataObject
) -> None:
    root = tmp_path_factory.mktemp("measure")
    firmware = OVMF.read_bytes() if tee == "snp" else _tdx_firmware()
    kernel, rtmr0, vcpus = KERNEL, None, "2"
    ccel = [(GOLDEN_TDX / name).read_bytes() for name in ("ccel_table.bin", "ccel_data.bin")]
    if part == "firmware":
        firmware = data.draw(mutated_bytes(firmware))
    elif part == "kernel":
        kernel = data.draw(mutated_bytes(kernel))
    elif part == "event log":
        which = data.draw(st.integers(0, 1))
        ccel[which] = data.draw(mutated_bytes(ccel[which]))
    elif part == "rtmr0":
        rtmr0 = data.draw(ARGUMENT | st.binary(max_size=60).map(bytes.hex))
    else:
        vcpus = data.draw(ARGUMENT | st.integers(-(2**40), 2**40).map(str))
    for name, content in [("firmware", firmware), ("kernel", kernel), ("ccel-table", ccel[0]),
                          ("ccel-data", ccel[1])]:  # fmt: skip
        (root / name).write_bytes(content)
    platform = "metal-qemu-snp" if tee == "snp" else "metal-qemu-tdx"
    argv = [
        "runtime", "reference-values", "--platform", platform,
        "--firmware", str(root / "firmware"), "--kernel", str(root / "kernel"),
        "--cmdline", "console=hvc0", "--max-vcpus", vcpus, "--output", str(root / "out.json"),
    ]  # fmt: skip
    if tee == "tdx":
        argv += (
            ["--tdx-rtmr0", rtmr0]
            if rtmr0 is not None
            else ["--tdx-event-log", str(root / "ccel-table"), str(root / "ccel-data")]
        )
    check(argv, root)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A host root with a user's containerd config, and stand-in artefacts beside it."""
    root = tmp_path_factory.mktemp("node")
    (root / "host" / "etc" / "containerd").mkdir(parents=True)
    (root / "host" / "etc" / "containerd" / "config.toml").write_text(V2_USER_CONFIG)
    write_standins(by_name("metal-qemu-snp"), root / "artefacts")
    (root / "target.json").write_text(
        json.dumps({"containerd-config-path": "/etc/containerd/config.toml"})
    )
    return root


@examples()
@given(part=st.sampled_from(["containerd config", "target config"]), data=st.data())
def test_node_installer_with_damaged_configs(node: Path, part: str, data: st.DataObject) -> None:
    with copy_of(node) as root:
        if part == "containerd config":
            path = root / "host" / "etc" / "containerd" / "config.toml"
            path.write_text(data.draw(mutated_text(path.read_text())))
        else:
            path = root / "target.json"
            text = path.read_text()
            path.write_text(
                data.draw(mutated_text(text) | mutated_tree(json.loads(text)).map(json.dumps))
            )
        argv = [
            "node-installer", "--host-root", str(root / "host"), "--platform", "metal-qemu-snp",
            "--artefacts", str(root / "artefacts"), "--target-config", str(root / "target.json"),
            "--no-restart",
        ]  # fmt: skip
        check(argv, root / "host")
