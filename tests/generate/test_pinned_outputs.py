"""What generate writes, pinned: the examples' YAML and policies must not change by accident.

Speed work on `generate` (issue 14: the JSON and initdata encoding, worker processes, the YAML
reading and writing) must leave every byte as it was. So the resources written for the seeds'
examples and for a few bench-like Deployments, and the manifest's policies, are hashed here
against the digests the tree wrote before that work (keys and reference values are not pinned:
they differ per workspace; nor is the runtime handler's hash, which follows the node installer's
code). Re-pinned when the Coordinator's Role lost `list` (issue 25's RBAC test): that verb is the
only difference from the digests recorded before issue 14's work. Re-pinned when the rules began
checking the image (issue 26): the rules text in each initdata is the only difference; and when
the emulated platforms' policies took the OCI version of the node's containerd (1.0.2-dev): their
containers' Version is the only difference; and when they took containerd 1.6's sandbox
resolv.conf options (`rbind, ro`): with that drop-in left out the old digests hold; and when the
Coordinator's container and Services took the transit engine's port 8200 (0571a02): the tree before
that commit wrote the old digests, the one after it these. A change on purpose (new rules,
settings, an injected field) updates the digest: the failure prints the new one.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from tests.generate.conftest import GenerateWorkspace

# example → (platform, sha256 of the resources and the manifest's policies after generate)
PINNED = {
    "sidecar-tls": (
        "emulated-snp",
        "d48996c554d0b40dfb11c1976ba27791379a4ba1d9d9e0dcf144de9d019449d5",
    ),
    "kustomize-app": (
        "emulated-tdx",
        "736a55f83e843a8455a319f3e1f82cfafcdf8423b2dfa991a0aaa95f4452147e",
    ),
    "multi-runtime": (
        "metal-qemu-snp",
        "a2ca188715f048b2fb1cbbe54b8846c4cd407eda0bee752be57fca1670ac83f9",
    ),
    "gpu": (
        "metal-qemu-snp-gpu",
        "89358fc2f859b3750253f162da379be62176faf80958ebe4e6773cffe0dcc8c2",
    ),
    "deployments": (
        "emulated-snp",
        "c6fc7a8018b738d868efd7213cdc1d994c826bbf0007b08010b0400a7aba50b7",
    ),
    # Each variant takes the fast way or ruamel's (yamlrtload, yamlrtdump).
    "variants": (
        "emulated-snp",
        "82725a1c909091ca1611e109934ba8d31cb9cac86a6f001324ee29258f602950",
    ),
}


def _deployment(index: int) -> str:
    return f"""apiVersion: apps/v1
kind: Deployment
metadata:
  name: service-{index}
  namespace: bench
spec:
  replicas: 2
  selector:
    matchLabels:
      app: service-{index}
  template:
    metadata:
      labels:
        app: service-{index}
      annotations:
        contrast.edgeless.systems/servicemesh-ingress: "api#8080#false"
    spec:
      runtimeClassName: contrast-cc
      containers:
        - name: service
          image: ghcr.io/example/frontend:1.4.2
          args: ["--port", "8080", "--replica", "{index}"]
          env:
            - name: SERVICE_INDEX
              value: "{index}"
"""


def _variants() -> dict[str, str]:
    """A Deployment written in the ways users write YAML: comments, blank lines, flow mappings,
    quoting, nulls, floats, block scalars, anchors, other indentation, several documents."""
    base = _deployment(3)
    # Sequences not indented under their key (what `kubectl get -o yaml` writes).
    flush = "".join(
        line[2:] + "\n" if line.startswith("      ") and index > 18 else line + "\n"
        for index, line in enumerate(base.splitlines())
    )
    variants = {
        "plain": base,
        "comments": base.replace("replicas: 2", "replicas: 2  # two\n  # a comment line"),
        "blank-line": base.replace("  selector:", "\n  selector:"),
        "flow-mapping": base.replace(
            "      labels:\n        app: service-3\n", '      labels: {app: service-3, tier: "x"}\n'
        ),
        "quoted": base.replace(
            "runtimeClassName: contrast-cc", 'runtimeClassName: "contrast-cc"'
        ).replace("- name: service\n", "- name: 'service'\n"),
        "no-value": base.replace("  replicas: 2", "  replicas: 2\n  paused:"),
        "float": base.replace("  replicas: 2", "  replicas: 2\n  progress: 0.5"),
        "block-scalar": base.replace(
            'args: ["--port", "8080", "--replica", "3"]',
            "args:\n            - |\n              echo hi\n              echo there",
        ),
        "anchor": base.replace("      labels:\n", "      labels: &labels\n"),
        "indentation": flush,
        "explicit-start": f"---\n{base}",
        "two-documents": f"{base}---\napiVersion: v1\nkind: Service\nmetadata:\n  name: s\n"
        "spec:\n  ports:\n  - port: 80\n",
        "init-container": base.replace(
            "      containers:",
            "      initContainers:\n        - name: prep\n"
            "          image: ghcr.io/example/frontend:1.4.2\n"
            '          command: ["sh", "-c", \'true\']\n      containers:',
        ),
        "volume": base.replace(
            "      containers:",
            "      volumes:\n        - name: data\n          emptyDir: {}\n      containers:",
        ),
        "zero": base.replace("replicas: 2", "replicas: 0"),
        "escapes": base.replace('value: "3"', 'value: "it\'s a \\"test\\" with \\u00e9"'),
        "hexadecimal": base.replace("replicas: 2", "replicas: 0x2"),
        "boolean-string": base.replace('value: "3"', "value: 'true'"),
    }
    return {name: text.replace("service-3\n", f"{name}\n") for name, text in variants.items()}


# A runtime handler's name ends in a hash of the node installer's code and runtime descriptions
# (kata/build.py), which changes with every change there; generate's own bytes do not.
_HANDLER_HASH = re.compile(rb"(contrast-cc-[a-z0-9-]+)-[0-9a-f]{8}(?![0-9a-z-])")


def _digest(workspace: GenerateWorkspace) -> str:
    hashed = hashlib.sha256()
    for path in sorted(workspace.resources.rglob("*")):
        if path.is_file():
            hashed.update(str(path.relative_to(workspace.root)).encode() + b"\0")
            hashed.update(_HANDLER_HASH.sub(rb"\1-HANDLER", path.read_bytes()) + b"\0")
    policies = json.loads((workspace.root / "manifest.json").read_text())["Policies"]
    hashed.update(json.dumps(policies, sort_keys=True).encode())
    return hashed.hexdigest()


@pytest.mark.parametrize(("example", "pinned"), PINNED.items(), ids=PINNED.keys())
def test_generate_writes_the_pinned_bytes(
    workspace: GenerateWorkspace,
    capsys: pytest.CaptureFixture[str],
    example: str,
    pinned: tuple[str, str],
) -> None:
    platform, digest = pinned
    if example == "variants":
        workspace.resources.mkdir(parents=True)
        for name, text in _variants().items():
            Path(workspace.resources / f"{name}.yml").write_text(text)
    elif example == "deployments":
        workspace.resources.mkdir(parents=True)
        for index in range(20):
            Path(workspace.resources / f"service-{index}.yml").write_text(_deployment(index))
    else:
        workspace.add_example(example)
    workspace.add_coordinator(platform)
    arguments = ("--reference-values", platform, str(workspace.resources))
    assert workspace.generate(*arguments) == 0
    written = _digest(workspace)
    assert written == digest, f"generate writes other bytes than before: {written}"
    capsys.readouterr()
