"""The node-installer DaemonSet runs exactly the command this package implements."""

from __future__ import annotations

import kubernetes_validate
import pytest

from contrast.cli import nodeinstaller
from contrast.cli.main import build_parser
from contrast.kuberesource import release
from contrast.platforms import PLATFORMS, Platform


@pytest.mark.parametrize("platform", [p for p in PLATFORMS if not p.emulated], ids=lambda p: p.name)
def test_the_daemonset_command_parses_and_mounts_what_it_names(platform: Platform) -> None:
    daemonset = release.node_installer(platform)
    kubernetes_validate.validate(daemonset, "1.33", strict=True)
    pod = daemonset["spec"]["template"]["spec"]
    (installer,) = pod["initContainers"]
    command = installer["command"]
    assert command[:2] == ["contrast", "node-installer"]
    arguments = build_parser().parse_args(command[1:])
    assert arguments.run is nodeinstaller.run_node_installer
    assert arguments.platform == platform.name
    mounts = {mount["mountPath"]: mount["name"] for mount in installer["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes[mounts[str(arguments.host_root)]]["hostPath"]["path"] == "/"
    target = volumes[mounts[str(arguments.target_config)]]
    assert target["configMap"] == {
        "name": "contrast-node-installer-target-config",
        "optional": True,
    }
    assert daemonset["metadata"]["name"] == f"{platform.runtime_class_name}-nodeinstaller"
    # The node's root is its only hostPath: a node without systemd has no bus socket to mount
    # (a Socket hostPath would keep the pod from starting); busctl reaches it through /host.
    host_paths = [v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v]
    assert host_paths == ["/"]
    assert {
        "name": "DBUS_SYSTEM_BUS_ADDRESS",
        "value": "unix:path=/host/run/dbus/system_bus_socket",
    } in (installer["env"])
