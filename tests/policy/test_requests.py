"""Requests are normalised to the agent's serde JSON by the shipped field schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contrast.policy.requests import (
    RequestError,
    default_schema,
    normalise_request,
    query_name,
    request_names,
)

KATA = Path(__file__).parents[2].parent / "shared" / "testdata" / "kata-policy"


def test_shipped_schema_is_the_conformance_schema() -> None:
    shipped = Path(__file__).parents[2] / "src/contrast/policy/assets/agent-request-schema.json"
    assert json.loads(shipped.read_text()) == json.loads(
        (KATA / "agent-request-schema.json").read_text()
    )


def test_every_field_present_with_its_default_and_nested_messages_null() -> None:
    request = normalise_request("CreateContainerRequest", {"container_id": "abc"})
    assert request == {
        "container_id": "abc",
        "exec_id": "",
        "string_user": None,
        "devices": [],
        "storages": [],
        "OCI": None,
        "sandbox_pidns": False,
        "shared_mounts": [],
        "stdin_port": 0,
        "stdout_port": 0,
        "stderr_port": 0,
    }


def test_nested_messages_and_lists_of_messages_are_normalised_recursively() -> None:
    request = normalise_request(
        "CreateContainerRequest",
        {
            "OCI": {
                "Linux": {"Resources": {"Devices": []}},
                "Mounts": [{"destination": "/x", "type": "bind"}],
                "Annotations": {"a": "b"},
            },
            "storages": [{"driver": "blk", "fs_group": {"group_id": 1000}}],
        },
    )
    oci = request["OCI"]
    assert oci["Process"] is None
    assert oci["Hooks"] is None
    assert oci["Annotations"] == {"a": "b"}
    # `type` is not a field (serde renames it `type_`), so it is dropped like any unknown key.
    assert oci["Mounts"] == [{"destination": "/x", "source": "", "type_": "", "options": []}]
    resources = oci["Linux"]["Resources"]
    assert resources["Devices"] == []
    assert resources["Memory"] is None
    assert resources["HugepageLimits"] == []
    assert oci["Linux"]["Namespaces"] == []
    assert request["storages"][0]["fs_group"] == {"group_id": 1000, "group_change_policy": 0}
    assert request["storages"][0]["shared"] is False


def test_unknown_keys_are_dropped_at_every_level() -> None:
    request = normalise_request(
        "UpdateInterfaceRequest",
        {"interface": {"name": "eth0", "pciPath": "0000:00:01.0"}, "extra": True},
    )
    assert set(request) == {"interface"}
    assert "pciPath" not in request["interface"]
    assert request["interface"]["IPAddresses"] == []
    assert request["interface"]["raw_flags"] == 0


def test_enums_are_integers_and_bytes_integer_lists() -> None:
    routes = normalise_request("UpdateRoutesRequest", {"routes": {"Routes": [{"family": 1}]}})
    assert routes["routes"]["Routes"][0]["family"] == 1
    written = normalise_request("WriteStreamRequest", {"data": [104, 105]})
    assert written == {"container_id": "", "exec_id": "", "data": [104, 105]}
    with pytest.raises(RequestError, match=r"IPAddresses\[0\]\.family"):
        normalise_request(
            "UpdateInterfaceRequest", {"interface": {"IPAddresses": [{"family": "v4"}]}}
        )
    with pytest.raises(RequestError, match=r"data\[0\]"):
        normalise_request("WriteStreamRequest", {"data": [256]})


def test_wrong_types_name_the_field() -> None:
    with pytest.raises(RequestError, match=r"CreateSandboxRequest\.sandbox_pidns"):
        normalise_request("CreateSandboxRequest", {"sandbox_pidns": "yes"})
    with pytest.raises(RequestError, match=r"RemoveContainerRequest\.timeout"):
        normalise_request("RemoveContainerRequest", {"timeout": -1})
    with pytest.raises(RequestError, match="must be a JSON object"):
        normalise_request("RemoveContainerRequest", [])


def test_copy_file_is_the_pre_processed_form() -> None:
    request = normalise_request("CopyFileRequest", {"path": "/a", "file_type": "Regular", "x": 1})
    assert request == {
        "path": "/a",
        "file_type": "Regular",
        "symlink_target": None,
        "file_size": 0,
        "file_mode": 0,
        "dir_mode": 0,
        "uid": 0,
        "gid": 0,
        "offset": 0,
    }
    assert normalise_request("CopyFileRequest", {})["file_type"] == "Unknown"
    with pytest.raises(RequestError, match="file_type"):
        normalise_request("CopyFileRequest", {"file_type": "Socket"})


def test_unknown_request_names_list_the_known_ones() -> None:
    with pytest.raises(RequestError) as raised:
        query_name("CreateContainer Request")
    assert "CreateContainerRequest" in raised.value.explain()
    assert "ExecProcessRequest" in raised.value.explain()


def test_rpc_names_map_to_query_names() -> None:
    assert query_name("ReadStdout") == "ReadStreamRequest"
    assert query_name("GetGuestDetails") == "GuestDetailsRequest"
    assert query_name("CreateContainerRequest") == "CreateContainerRequest"
    assert "CopyFileRequest" in request_names()
    assert len(request_names()) == len(set(default_schema().rpc_to_query.values()))


@pytest.mark.parametrize("path", sorted(KATA.rglob("testcases.json")), ids=lambda p: p.parent.name)
def test_every_kata_request_normalises_and_is_stable(path: Path) -> None:
    for case in json.loads(path.read_text()):
        once = normalise_request(case["kind"], case["request"])
        assert normalise_request(case["kind"], once) == once
