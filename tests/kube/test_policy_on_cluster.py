"""Pods held to their policy on the real cluster, by the emulated confidential runtime.

The cluster gets the emulated-snp runtime from the project's node installer (`cluster.sh
install-runtime`). A user's resources (the Coordinator's, as `contrast coordinator-resources`
prints them, and five Deployments of one busybox workload) go through `contrast generate` once,
as typed on a workstation; then each Deployment but one is changed the way an attacker on the
control plane (or a careless edit after `generate`) would change it, and all are applied at once:

- `app`, as generated: Ready under the RuntimeClass, and a `kubectl exec` it does not allow is
  refused with the policy's reason;
- `app-command`, `app-env`, `app-image`, `app-mount`: another command, another env value, the
  same name and tag at another digest, and a hostPath mount of the node's emulated roots added.
  Each container's create is refused, and its `Failed` event names the policy rule.

The events are the kubelet's, as `kubectl get events` shows them to the user.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from contrast.cli.main import main
from tests.kube import deploy
from tests.kube.cluster import Cluster, install_emulated_runtime
from tests.kube.flow import deployment_yaml

PLATFORM = "emulated-snp"
READY_TIMEOUT = 120
BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static
COMMAND = ["/bin/sh", "-c", "echo started; exec sleep 1000000"]
CHANGED = ("app-command", "app-env", "app-image", "app-mount")


def busybox_image(path: Path, marker: str) -> None:
    """A docker archive of busybox with a file /marker: another marker, another digest."""
    if not BUSYBOX.is_file():
        pytest.fail(f"{BUSYBOX} is missing: install busybox-static (scripts/system-deps.sh)")
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        for name, kind, mode in (("bin", tarfile.DIRTYPE, 0o755), ("tmp", tarfile.DIRTYPE, 0o1777)):
            info = tarfile.TarInfo(name)
            info.type, info.mode = kind, mode
            tar.addfile(info)
        info = tar.gettarinfo(str(BUSYBOX), "bin/busybox")
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        with BUSYBOX.open("rb") as binary:
            tar.addfile(info, binary)
        link = tarfile.TarInfo("bin/sh")
        link.type, link.linkname = tarfile.SYMTYPE, "busybox"
        tar.addfile(link)
        data = marker.encode()
        info = tarfile.TarInfo("marker")
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    layer_bytes = layer.getvalue()
    diff_id = hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": ["/bin/busybox"], "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
    }).encode()  # fmt: skip
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    manifest = json.dumps(
        [{"Config": config_name, "RepoTags": [], "Layers": [f"{diff_id}/layer.tar"]}]
    ).encode()
    with tarfile.open(path, "w") as archive:
        for name, blob in ((f"{diff_id}/layer.tar", layer_bytes), (config_name, config),
                           ("manifest.json", manifest)):  # fmt: skip
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            archive.addfile(info, io.BytesIO(blob))


def push(archive: Path, reference: str, directory: Path) -> str:
    """Pushes a docker archive as `reference` (repo:tag); returns repo:tag@digest."""
    digest_file = directory / f"{archive.stem}.digest"
    subprocess.run(
        ["skopeo", "copy", "--quiet", "--dest-tls-verify=false", "--digestfile", str(digest_file),
         f"docker-archive:{archive}", f"docker://{reference}"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return f"{reference}@{digest_file.read_text().strip()}"


def cli(*arguments: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(arguments))
    assert code == 0, f"contrast {' '.join(arguments)} exited {code}"
    return out.getvalue()


def changed(workload: dict[str, Any], name: str, other_image: str) -> dict[str, Any]:
    """`workload` as generated, with what `name` says changed after generate."""
    edited = copy.deepcopy(workload)
    spec = edited["spec"]["template"]["spec"]
    (app,) = [c for c in spec["containers"] if c["name"] == "app"]
    if name == "app-command":
        app["command"] = ["/bin/sh", "-c", "cat /proc/self/environ; exec sleep 1000000"]
    elif name == "app-env":
        app["env"] = [{"name": "GREETING", "value": "evil"}]
    elif name == "app-image":
        app["image"] = other_image
    elif name == "app-mount":
        spec.setdefault("volumes", []).append(
            {"name": "roots", "hostPath": {"path": "/var/lib/contrast-emulated-runtime"}}
        )
        app.setdefault("volumeMounts", []).append({"name": "roots", "mountPath": "/roots"})
    return edited


def failed_events(cluster: Cluster, namespace: str) -> dict[str, str]:
    """The newest `Failed` or `FailedCreatePodSandBox` event per Deployment of the namespace."""
    listed = json.loads(cluster.kubectl("-n", namespace, "get", "events", "-o", "json").stdout)
    found: dict[str, str] = {}
    for event in sorted(listed["items"], key=lambda e: e.get("lastTimestamp") or ""):
        if event["reason"] in ("Failed", "FailedCreatePodSandBox"):
            pod = event["involvedObject"]["name"]
            found[pod.rsplit("-", 2)[0]] = event["message"]
    return found


def test_a_generated_pod_runs_and_every_change_after_generate_is_refused(
    kube_cluster: Cluster, release_layout: Path, tmp_path: Path
) -> None:
    cluster = kube_cluster
    began = time.monotonic()
    handler = install_emulated_runtime(cluster, PLATFORM)
    namespace = cluster.namespace("policy")
    images = {}
    for marker in ("one", "two"):
        busybox_image(tmp_path / f"busybox-{marker}.tar", marker)
        images[marker] = push(
            tmp_path / f"busybox-{marker}.tar", f"{cluster.registry}/policy/busybox:1", tmp_path
        )
    assert images["one"] != images["two"]  # the same name and tag, another digest

    workspace = tmp_path / "workspace"
    resources = workspace / "resources"
    resources.mkdir(parents=True)
    (resources / "coordinator.yml").write_text(
        cli("coordinator-resources", "--platform", PLATFORM, "--namespace", namespace)
    )
    (resources / "app.yml").write_text("---\n".join(
        deployment_yaml(name, namespace, images["one"], COMMAND, env={"GREETING": "hello"})
        for name in ("app", *CHANGED)
    ))  # fmt: skip
    generated = time.monotonic()
    cli(
        "generate", "--workspace-dir", str(workspace), "--reference-values", PLATFORM,
        "--skip-initializer", "--oci-layout", str(release_layout),
        "--insecure-registry", cluster.registry, str(resources),
    )  # fmt: skip
    print(f"generate: {time.monotonic() - generated:.1f} s")
    workloads = {
        d["metadata"]["name"]: d for d in deploy.documents_of((resources / "app.yml").read_text())
    }
    template = workloads["app"]["spec"]["template"]["spec"]
    assert template["runtimeClassName"] == handler
    applied = [workloads["app"]] + [changed(workloads[n], n, images["two"]) for n in CHANGED]
    cluster.kubectl("apply", "-f", "-", input=deploy.dump(applied))

    deploy.wait_ready(cluster, namespace, "app.kubernetes.io/name=app", 1, READY_TIMEOUT)
    print(f"app Ready under {handler} {time.monotonic() - began:.1f} s after the test began")
    log = cluster.kubectl("-n", namespace, "logs", "deploy/app").stdout.decode()
    assert "started" in log

    deadline = time.monotonic() + READY_TIMEOUT
    events: dict[str, str] = {}
    while set(CHANGED) - set(events):
        if time.monotonic() > deadline:
            pytest.fail(f"no refusal for {sorted(set(CHANGED) - set(events))} in {READY_TIMEOUT} s"
                        f": {events}\n{deploy.describe(cluster, namespace)}")  # fmt: skip
        time.sleep(1)
        events = failed_events(cluster, namespace)
    for name in CHANGED:
        print(f"{name}: {events[name]}")
    blocked = "CreateContainerRequest is blocked by policy: "
    expected = {
        "app-command": "Process.Args expected",
        "app-env": "GREETING=evil",
        "app-image": f"io.kubernetes.cri.image-name expected {images['one']} got ",
        "app-mount": '"destination": "/roots"',
    }
    for name, rule in expected.items():
        message = events[name]
        assert blocked in message, message
        # The refused container's own checks come first, each naming the rule that failed.
        own = [
            check
            for check in message.split(blocked, 1)[1].split("; ")
            if check.startswith("CreateContainerRequest: policy container 1 app - ")
        ]
        assert own, message
        assert message.split(blocked, 1)[1].startswith(own[0]), message
        assert any(rule in check for check in own), message
    assert "Process.Args expected" in events["app-command"]
    assert "Process.Env (variables the policy does not allow)" in events["app-env"]
    assert "OCI.Mounts (mounts the policy does not allow" in events["app-mount"]
    for name in CHANGED:
        phase = cluster.kubectl(
            "-n", namespace, "get", "pods", "-l", f"app.kubernetes.io/name={name}",
            "-o", "jsonpath={.items[*].status.containerStatuses[*].ready}",
        ).stdout.decode()  # fmt: skip
        assert "true" not in phase, (name, phase)

    # kubectl exec: the policy allows no command (Kata's default), so this one is refused.
    refused = cluster.kubectl("-n", namespace, "exec", "deploy/app", "--", "/bin/sh", "-c", "id",
                              check=False)  # fmt: skip
    stderr = refused.stderr.decode()
    print(f"kubectl exec: {stderr.strip()}")
    assert refused.returncode != 0
    assert "ExecProcessRequest is blocked by policy" in stderr, stderr
    assert "command /bin/sh -c id is not allowed" in stderr, stderr
    print(f"the whole test: {time.monotonic() - began:.1f} s")
    cluster.kubectl("delete", "namespace", namespace, "--wait=false")
