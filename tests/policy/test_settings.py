"""Settings files, directories with RFC 6902 drop-ins, and our defaults."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contrast.policy.json_patch import JsonPatchError, apply_patch
from contrast.policy.settings import (
    Settings,
    SettingsError,
    _copy,
    default_settings,
    load_settings,
)

DATA = Path(__file__).resolve().parents[3] / "shared" / "testdata" / "kata-policy"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="needs ../shared/testdata/kata-policy")


def test_defaults_are_katas_with_contrasts_changes() -> None:
    settings = default_settings()
    defaults = settings.get("request_defaults")
    assert defaults["ReadStreamRequest"] is True
    assert "^CONTRAST_[A-Z0-9_]*=.*$" in defaults["CreateContainerRequest"]["allow_env_regex"]
    assert settings.guest_pull
    assert settings.get("cluster_config", "emptydir_type") == "block-encrypted"


def test_accessors_return_copies() -> None:
    settings = default_settings()
    settings.section("common")["default_caps"].clear()
    assert settings.get("common", "default_caps")


def write_settings_dir(tmp_path: Path, drop_ins: dict[str, list[dict[str, Any]]]) -> Path:
    shutil.copy(DATA / "genpolicy-settings.json", tmp_path / "settings.json")
    (tmp_path / "settings.d").mkdir()
    for name, patch in drop_ins.items():
        (tmp_path / "settings.d" / name).write_text(json.dumps(patch))
    return tmp_path


@needs_data
def test_drop_ins_apply_in_name_order(tmp_path: Path) -> None:
    directory = write_settings_dir(
        tmp_path,
        {
            "20-second.json": [{"op": "replace", "path": "/kata_config/oci_version", "value": "2"}],
            "10-first.json": [
                {"op": "test", "path": "/kata_config/oci_version", "value": "1.1.0"},
                {"op": "replace", "path": "/kata_config/oci_version", "value": "1"},
                {"op": "add", "path": "/common/default_caps/-", "value": "CAP_NEW"},
                {"op": "remove", "path": "/request_defaults/CloseStdinRequest"},
            ],
        },
    )
    settings = load_settings(directory)
    assert settings.get("kata_config", "oci_version") == "2"
    assert settings.get("common", "default_caps")[-1] == "CAP_NEW"
    assert settings.get("request_defaults", "CloseStdinRequest") is None


@needs_data
def test_katas_drop_in_examples_apply(tmp_path: Path) -> None:
    shutil.copy(DATA / "genpolicy-settings.json", tmp_path / "genpolicy-settings.json")
    shutil.copytree(DATA / "settings-drop-in-examples", tmp_path / "genpolicy-settings.d")
    for example in (tmp_path / "genpolicy-settings.d").glob("*"):
        if example.name not in ("10-non-coco-drop-in.json", "20-oci-1.3.0-drop-in.json"):
            example.unlink()
    settings = load_settings(tmp_path)
    assert settings.guest_pull is False
    assert settings.get("cluster_config", "emptydir_type") == "shared-fs"
    assert settings.get("kata_config", "oci_version") == "1.3.0"


@needs_data
def test_a_failing_test_op_names_the_drop_in(tmp_path: Path) -> None:
    directory = write_settings_dir(
        tmp_path,
        {"10-x.json": [{"op": "test", "path": "/cluster_config/guest_pull", "value": False}]},
    )
    with pytest.raises(SettingsError, match=r"10-x\.json"):
        load_settings(directory)


def test_directory_without_settings(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"settings\.json"):
        load_settings(tmp_path)


def test_file_that_is_not_settings(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text('{"common": {}}')
    with pytest.raises(SettingsError, match="lack"):
        load_settings(path)
    path.write_text("{")
    with pytest.raises(SettingsError, match="not JSON"):
        load_settings(path)


@pytest.mark.parametrize(
    "patch",
    [
        [{"op": "remove", "path": "/absent"}],
        [{"op": "replace", "path": "/list/5", "value": 1}],
        [{"op": "move", "from": "/absent", "path": "/b"}],
        [{"op": "test", "path": "/a", "value": 2}],
        [{"op": "add", "path": "no-slash", "value": 1}],
        [{"op": "add", "path": "/a/b/c", "value": 1}],
        {"op": "add"},
    ],
)
def test_bad_patches_raise_and_leave_the_document(patch: Any) -> None:
    document = {"a": 1, "list": [1, 2]}
    with pytest.raises(JsonPatchError):
        apply_patch(document, patch)
    assert document == {"a": 1, "list": [1, 2]}


def test_pointer_escapes_and_array_positions() -> None:
    document = {"a/b": {"m~n": [1, 3]}}
    patched = apply_patch(
        document,
        [
            {"op": "add", "path": "/a~1b/m~0n/1", "value": 2},
            {"op": "add", "path": "/a~1b/m~0n/-", "value": 4},
        ],
    )
    assert patched == {"a/b": {"m~n": [1, 2, 3, 4]}}
    assert document == {"a/b": {"m~n": [1, 3]}}


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("devices", "vfio", "nvidia", "pgpu_resource_keys"), [{"x": 1}],
         "devices.vfio.nvidia.pgpu_resource_keys[0] is an object, not a string"),
        (("common",), [], "common is a list, not an object"),
        (("cluster_config", "guest_pull"), "yes",
         "cluster_config.guest_pull is a string, not a boolean"),
    ],
)  # fmt: skip
def test_settings_of_another_shape_name_the_place(
    tmp_path: Path, path: tuple[str, ...], value: Any, message: str
) -> None:
    document = json.loads(default_settings().to_text())
    node = document
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    (tmp_path / "settings.json").write_text(json.dumps(document))
    with pytest.raises(SettingsError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_settings(tmp_path / "settings.json")


def test_keys_the_defaults_lack_are_free(tmp_path: Path) -> None:
    document = json.loads(default_settings().to_text())
    document["common"]["my_rule_setting"] = [{"anything": 1}]
    (tmp_path / "settings.json").write_text(json.dumps(document))
    assert load_settings(tmp_path / "settings.json").get("common", "my_rule_setting")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(value=JSON)
def test_the_fast_copy_is_a_deep_copy(value: Any) -> None:
    copied = _copy(value)
    assert copied == value

    def containers(node: Any) -> list[int]:
        if isinstance(node, dict):
            return [id(node), *(i for item in node.values() for i in containers(item))]
        if isinstance(node, list):
            return [id(node), *(i for item in node for i in containers(item))]
        return []

    assert not set(containers(copied)) & set(containers(value))


def test_accessors_hand_out_copies() -> None:
    loaded = default_settings()
    section = loaded.section("common")
    section.clear()
    assert loaded.section("common")
    nested = loaded.get("cluster_config")
    nested["guest_pull"] = "changed"
    assert loaded.get("cluster_config", "guest_pull") != "changed"


def test_accessors_hand_out_equal_copies_of_what_is_not_json_data() -> None:
    """Parts are copied from their JSON text; a part whose text reads back otherwise (a tuple,
    a key that is not a string, NaN) is copied as it is instead."""
    odd = {"numbers": (1, 2), "keys": {1: "one"}, "nan": [math.nan], "big": [2**64]}
    loaded = Settings({**default_settings().document, "common": {**odd}})
    for _ in range(2):  # the first reading makes the text, the second uses it
        common = loaded.section("common")
        assert common["numbers"] == (1, 2)
        assert common["keys"] == {1: "one"}
        assert math.isnan(common["nan"][0])
        assert common["big"] == [2**64]
        assert loaded.get("common", "keys") == {1: "one"}
        pause = loaded.section("pause_container")
        assert pause == default_settings().section("pause_container")
        pause.clear()


def _typed(node: Any) -> Any:
    """`node` with every scalar paired with its type, so that 1, 1.0 and True differ."""
    if isinstance(node, dict):
        return {key: _typed(item) for key, item in node.items()}
    if isinstance(node, list):
        return [_typed(item) for item in node]
    return (type(node), node)


@settings(max_examples=200, deadline=None)
@given(value=JSON)
def test_accessors_copy_values_and_their_types(value: Any) -> None:
    loaded = Settings({**default_settings().document, "common": {"part": [value]}})
    for _ in range(2):  # the first reading makes the text, the second uses it
        copied = loaded.get("common", "part")
        assert _typed(copied) == _typed([value])
        copied.append("changed")
