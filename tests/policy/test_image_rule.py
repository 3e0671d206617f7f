"""A container whose image was swapped after `generate` is refused, by the rule that says so.

The requests are Kata's own allowed CreateContainer cases (../shared/testdata/kata-policy) with
the image-name annotation CRI writes; the policies are generated from the same pods. Only the
image changes, so the command, env and mounts all still match: the image rule alone refuses.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from contrast.cli.main import main
from contrast.policy.engine import AgentPolicy
from contrast.policy.explain import image_allows
from tests.policy.test_kata_conformance import (
    DATA,
    IMAGE_NAME,
    generated_for,
    with_image_name,
)

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="needs ../shared/testdata/kata-policy")

UNPINNED = "state/execprocess"  # quay.io/prometheus/busybox:latest
PINNED = "createcontainer/volumes/config_map"  # registry.k8s.io/pause:3.6@sha256:3d38…
PINNED_DIGEST = "sha256:3d380ca8864549e74af4b29c10f9cb0956236dfb01c40ca076fb6c37253234db"


def _first_create(directory: str) -> tuple[str, dict[str, Any]]:
    """The policy of `directory` and its first CreateContainer request, as allowed."""
    generated = generated_for(DATA / directory)
    cases = json.loads((DATA / directory / "testcases.json").read_text())
    case = next(c for c in cases if c["kind"] == "CreateContainerRequest")
    request = with_image_name(case, dict(generated.policy_data))["request"]
    assert AgentPolicy(generated.policy_text).evaluate("CreateContainerRequest", request).allowed
    return generated.policy_text, copy.deepcopy(request)


def _decide(policy_text: str, request: dict[str, Any], image: str | None) -> tuple[bool, str]:
    changed = copy.deepcopy(request)
    annotations = changed["OCI"]["Annotations"]
    if image is None:
        del annotations[IMAGE_NAME]
    else:
        annotations[IMAGE_NAME] = image
    decision = AgentPolicy(policy_text).evaluate("CreateContainerRequest", changed)
    return decision.allowed, "\n".join(decision.prints)


def test_another_image_is_refused_naming_the_rule() -> None:
    policy, request = _first_create(UNPINNED)
    allowed, prints = _decide(policy, request, "registry.example/evil:latest")
    assert not allowed
    assert (
        f"{IMAGE_NAME} expected quay.io/prometheus/busybox:latest"
        " got registry.example/evil:latest" in prints
    )
    # Nothing else differs: the image is the only reason.
    assert prints.count("policy container 1") == 1


@pytest.mark.parametrize(
    ("image", "allowed"),
    [
        ("quay.io/prometheus/busybox:latest", True),
        ("quay.io/prometheus/busybox", True),  # containerd's default tag
        ("quay.io/prometheus/busybox:1.36", False),  # another tag
        ("quay.io/other/busybox:latest", False),
        ("docker.io/prometheus/busybox:latest", False),
        ("prometheus/busybox:latest", False),  # docker.io, not quay.io
        (None, False),  # no annotation: nothing names the image
        ("", False),
    ],
)
def test_an_unpinned_policy_image_allows_its_name_and_tag(image: str | None, allowed: bool) -> None:
    policy, request = _first_create(UNPINNED)
    assert _decide(policy, request, image)[0] is allowed


@pytest.mark.parametrize(
    ("image", "allowed"),
    [
        (f"registry.k8s.io/pause:3.6@{PINNED_DIGEST}", True),
        (f"registry.k8s.io/pause@{PINNED_DIGEST}", True),  # containerd's spelling
        (f"registry.k8s.io/pause@{PINNED_DIGEST.upper().replace('SHA256', 'sha256')}", True),
        ("registry.k8s.io/pause:3.6", False),  # the tag, which may have moved
        ("registry.k8s.io/pause@sha256:" + "0" * 64, False),
        (f"registry.k8s.io/pause:3.6@{PINNED_DIGEST[:-1]}0", False),
    ],
)
def test_a_pinned_policy_image_allows_its_digest_only(image: str, allowed: bool) -> None:
    policy, request = _first_create(PINNED)
    assert _decide(policy, request, image)[0] is allowed
    assert image_allows(f"registry.k8s.io/pause:3.6@{PINNED_DIGEST}", image) is allowed


def _with_guest_pull(request: dict[str, Any], source: str) -> dict[str, Any]:
    changed = copy.deepcopy(request)
    storage = {
        "driver": "image_guest_pull",
        "driver_options": [],
        "source": source,
        "fstype": "overlay",
        "options": [],
        "mount_point": changed["OCI"]["Root"]["Path"],
        "fs_group": None,
        "shared": False,
    }
    changed["storages"] = [storage, *changed.get("storages", [])]
    return changed


def test_the_guest_pull_storage_must_pull_the_policy_image() -> None:
    policy_text, request = _first_create(UNPINNED)
    policy = AgentPolicy(policy_text)
    image = request["OCI"]["Annotations"][IMAGE_NAME]
    assert policy.evaluate("CreateContainerRequest", _with_guest_pull(request, image)).allowed
    # The annotation is the policy's, but the guest would pull another image.
    swapped = _with_guest_pull(request, "registry.example/evil:latest")
    decision = AgentPolicy(policy_text).evaluate("CreateContainerRequest", swapped)
    assert not decision.allowed
    assert any(
        "image_guest_pull storage source expected quay.io/prometheus/busybox:latest"
        " got registry.example/evil:latest" in line
        for line in decision.prints
    )


def test_explain_says_the_image_differs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    policy_text, request = _first_create(PINNED)
    request["OCI"]["Annotations"][IMAGE_NAME] = "registry.k8s.io/pause:3.6"
    (tmp_path / "policy.rego").write_text(policy_text)
    (tmp_path / "request.json").write_text(
        json.dumps([{"kind": "CreateContainerRequest", "request": request}])
    )
    code = main(
        ["policy", "explain", "--policy", str(tmp_path / "policy.rego"),
         "--request", str(tmp_path / "request.json")]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 3, out
    assert "1: CreateContainerRequest: denied" in out
    assert (
        f"- Annotations[{IMAGE_NAME}]: policy expects"
        f' "registry.k8s.io/pause:3.6@{PINNED_DIGEST}" (compared by digest),'
        ' request has "registry.k8s.io/pause:3.6"' in out
    ), out
    # The differences are the image alone.
    assert out.count("    - ") == 1, out
