"""What passed `generate`'s shape checks in the previous run, known by a digest.

The check (`schema.py`) runs jsonschema, pure Python, over every resource: with loading the
definitions and starting worker processes it was a third of an unchanged re-run. Its verdict
depends on nothing but the resource and the schemas, so a resource whose every byte is one that
passed last time passes again. The cache (`schema-cache.json` in the workspace) lists the sha256
of each resource that passed, over:

- the cache format, this tool's version, Python's version, the check's own code (`schema.py`)
  and the versions of the libraries that validate (jsonschema, referencing and its
  specifications) and of the package that ships the schemas and picks the Kubernetes version
  (kubernetes-validate): the same resource under another schema is checked again;
- the resource as the check reads it: its apiVersion and kind, and its plain form
  (`yamlio.to_plain`, exactly what the validator and the null-entry scan see) as JSON, key order
  included (the verdict does not depend on it; keeping it only makes the key stricter).

A resource whose apiVersion or kind is not a string has no key: the check refuses it before any
lookup. Only passes are recorded, so an error is found and reported again on every run.

`generate` records each resource as it read it and, checked for this purpose, as it wrote it: the
next run reads that. The file holds the resources of the last run that added one (two entries
each at most); one that cannot be read or has another shape is ignored, never an error.

The same file remembers the other checks of an input: the previous `manifest.json` against the
manifest's model (`Manifest.from_bytes(draft=True)`), which generate runs so that it never
replaces a file that is not a manifest, and the policy rules against regorus's parser. Parsing
the entries' reference values loads the modules of every TEE, the largest part of an unchanged
re-run's start. A manifest's key covers its bytes, the code the check runs (the model and the
modules it calls: bounded JSON reading, the seed share key check, the SNP and TDX reference
values) and the versions of the libraries it calls (cryptography, shamir-mnemonic); the
rules' key their text, `policy/engine.py` and regorus's version; both with the same format, tool
and Python versions as above, and a tag keeps the kinds of key apart.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import contrast
from contrast import distributions
from contrast.boundedfile import FileTooLarge, read_bounded
from contrast.boundedjson import JsonInputError, JsonLimits, load
from contrast.files import write_atomically
from contrast.kuberesource import schema as schema_module
from contrast.kuberesource.yamlio import fingerprint

FORMAT = 1
FILE = "schema-cache.json"
# The distributions whose code or data decide the verdict (see the module's docstring).
LIBRARIES = ("jsonschema", "referencing", "jsonschema-specifications", "kubernetes-validate")
# The same for the manifest check: the modules (below `contrast`) and distributions it runs.
MANIFEST_CODE = (
    "manifest/model.py",
    "manifest/errors.py",
    "attestation/snp/reference.py",
    "attestation/snp/report.py",
    "attestation/tdx/reference.py",
    "seed/shares.py",
    "seed/threshold.py",
    "boundedjson.py",
    "errors.py",
)
MANIFEST_LIBRARIES = ("cryptography", "shamir-mnemonic")
# And for the rules check (`policy.engine.check_rules`): regorus parses the rules.
RULES_CODE = ("policy/engine.py", "errors.py")
RULES_LIBRARIES = ("gordon-to-regorus",)
# The checks of generate's other inputs, by the tag that keeps their keys apart.
INPUT_CHECKS = {
    "manifest": (MANIFEST_CODE, MANIFEST_LIBRARIES),
    "rules": (RULES_CODE, RULES_LIBRARIES),
}
# 65 bytes a resource: a file of this size lists about 300 000 of them.
LIMITS = JsonLimits(max_bytes=20 * 1024 * 1024, max_depth=2)
_HEX = frozenset("0123456789abcdef")


def _digest(code: list[Path], libraries: tuple[str, ...]) -> str:
    files = [hashlib.sha256(path.read_bytes()).hexdigest() for path in code]
    context = [
        FORMAT,
        contrast.__version__,
        sys.version,
        *files,
        *distributions.versions(libraries),
    ]
    return hashlib.sha256(json.dumps(context).encode()).hexdigest()


def schema_digest() -> str:
    """sha256 of what the verdict depends on besides the resource (see the module docstring)."""
    return _digest([Path(schema_module.__file__)], LIBRARIES)


def input_digest(check: str) -> str:
    """sha256 of what `check` ("manifest", "rules") depends on besides its input.

    Found by path, not imported: not importing the model or the parser is the point.
    """
    code, libraries = INPUT_CHECKS[check]
    package = Path(contrast.__file__).parent
    return _digest([package / name for name in code], libraries)


class SchemaCache:
    """The digests read from `path` and those of this run's resources; `save()` keeps the latter."""

    def __init__(
        self,
        path: Path,
        digest: str | None = None,
        input_digests: Mapping[str, str] | None = None,
    ) -> None:
        self.path = path
        self._schemas = (digest or schema_digest()).encode()
        self._inputs = dict(input_digests or {})  # `input_digest`s, made on first use
        self._read = self._load(path)
        self._passed: set[str] = set()

    @staticmethod
    def _load(path: Path) -> frozenset[str]:
        try:
            data = read_bounded(path, LIMITS.max_bytes, what="the schema cache")
            document = load(data, LIMITS, what=str(path))
        except (OSError, JsonInputError, FileTooLarge):
            return frozenset()
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            return frozenset()
        passed = document.get("passed")
        if not isinstance(passed, list):
            return frozenset()
        return frozenset(key for key in passed if _is_hash(key))

    def key(self, resource: Mapping[str, Any], content: str | None = None) -> str | None:
        """The digest of `resource` as the check reads it; None if it has none (see above).

        `content`: the resource's `fingerprint`, if the caller knows it (made when it was read).
        """
        api_version, kind = resource.get("apiVersion"), resource.get("kind")
        if not isinstance(api_version, str) or not isinstance(kind, str):
            return None
        # `json.dumps([apiVersion, kind, to_plain(resource)])`, compact, without the copy.
        head = json.dumps([str(api_version), str(kind)], separators=(",", ":"), ensure_ascii=False)
        content = fingerprint(resource) if content is None else content
        text = f"{head[:-1]},{content}]".encode("utf-8", "surrogatepass")
        return hashlib.sha256(self._schemas + b"\0" + text).hexdigest()

    def input_key(self, check: str, data: bytes) -> str:
        """The digest of an input of `check` ("manifest", "rules") as that check reads it."""
        if check not in self._inputs:
            self._inputs[check] = input_digest(check)
        context = f"{check}\0{self._inputs[check]}\0".encode()
        return hashlib.sha256(context + data).hexdigest()

    def passed(self, key: str | None) -> bool:
        """Whether the input of `key` passed its check in the previous run (or this one)."""
        return key is not None and (key in self._read or key in self._passed)

    def record(self, key: str | None) -> None:
        """Note that the input of `key` passed its check in this run."""
        if key is not None:
            self._passed.add(key)

    def save(self) -> None:
        """Write this run's digests, unless the file already lists them all.

        A run that adds none (an unchanged re-run, whose input is the previous run's output)
        leaves the file as it is, with the entries it no longer needs: the file never grows
        without being written, and then it holds this run's resources only.
        """
        if self._passed <= self._read:
            return
        document = {"format": FORMAT, "passed": sorted(self._passed)}
        write_atomically(self.path, json.dumps(document, indent=0).encode() + b"\n")


def _is_hash(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and set(value) <= _HEX
