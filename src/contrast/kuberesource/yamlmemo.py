"""The plain documents of the resource files `generate` read or wrote, known by their text.

An unchanged re-run reads back the files the previous run wrote, and parsing them was the
largest part of its time left: libyaml's events and PyYAML's constructor take 2-2.5 ms for a
generated workload file (most of it a 16 KB initdata annotation), where reading the same content
as JSON takes 0.1 ms. So `yaml-cache.json` in the workspace maps the sha256 of a file's text to
its documents' content as `yamlio` fingerprints them (compact JSON: values and key order), and
`yamlio.load_text` takes them from there instead of parsing the text.

What makes an entry sound:
- The key covers every byte of the text and the code that turns text into documents: this
  module, `yamlio` and its readers and writers (`yaml*.py` here), the tool's version, Python's,
  PyYAML's (whose wheels carry the libyaml that parses) and ruamel's (whose resolver decides
  what a scalar is).
- A file that was read: its entry is what the plain reader (`yamlfast`) made of those bytes.
- A file that generate wrote: its entry is the content it was written for. Every changed
  document's round-trip node is checked against that content before it is written
  (`ResourceFile._to_write`), unchanged documents are written verbatim (their entry is what was
  read), and the writers write what ruamel writes from a node, which reads back as the node's
  content: the property `tests/kuberesource/test_yamlmemo.py` checks on random documents and
  the examples. Only text of printable ASCII lines, though: ruamel writes some other characters
  so that they read back as something else (a NEL in a single-quoted string folds into a
  space), so a written file with any other character is parsed again by the next run.
- Text with an anchor (`&`) is never remembered: an alias shares one node between two places,
  which JSON cannot say. Such a file is parsed every time.

The file holds the entries of the last run that added one (the files it read and wrote); one
that cannot be read or has another shape is ignored, never an error. Deleting it is always safe.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ruamel.yaml

import contrast
from contrast import distributions
from contrast.files import write_atomically

FORMAT = 1
FILE = "yaml-cache.json"
# About 20 KB an entry for a generated workload: 10 000 of them is 200 MB. Larger is ignored.
MAX_BYTES = 256 * 1024 * 1024
_HEX = frozenset("0123456789abcdef")


def code_digest() -> str:
    """sha256 of what turns a text into documents besides the text (see the module docstring)."""
    here = Path(__file__).parent
    hashed = hashlib.sha256()
    for path in sorted(here.glob("yaml*.py")):
        hashed.update(path.name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    context = [
        FORMAT,
        contrast.__version__,
        sys.version,
        *distributions.versions(["PyYAML"]),  # not imported: a re-run may parse nothing
        ruamel.yaml.__version__,
        hashed.hexdigest(),
    ]
    return hashlib.sha256(json.dumps(context).encode()).hexdigest()


class YamlMemo:
    """The entries read from `path` and this run's; `save()` keeps this run's."""

    def __init__(self, path: Path, digest: str | None = None) -> None:
        self.path = path
        self._code = (digest or code_digest()).encode()
        self._read = self._load(path)
        self._this_run: dict[str, list[str]] = {}

    @staticmethod
    def _load(path: Path) -> dict[str, list[str]]:
        # Not `boundedjson.load`: its depth scan of 2 MB of escaped JSON took 25 ms, a tenth of
        # a re-run. This file is only ever ignored when wrong, and the parser's own guard turns
        # deep nesting into RecursionError.
        try:
            with path.open("rb") as source:
                data = source.read(MAX_BYTES + 1)
            document = json.loads(data) if len(data) <= MAX_BYTES else None
        except (OSError, ValueError, RecursionError):
            return {}
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            return {}
        entries = document.get("files")
        if not isinstance(entries, dict):
            return {}
        return {
            key: value
            for key, value in entries.items()
            if _is_hash(key)
            and isinstance(value, list)
            and all(isinstance(item, str) for item in value)
        }

    def key(self, text: str) -> str:
        data = text.encode("utf-8", "surrogatepass")
        return hashlib.sha256(self._code + b"\0" + data).hexdigest()

    def lookup(self, text: str) -> tuple[list[str], tuple[Any, ...]] | None:
        """The fingerprints and plain documents of a file whose text is `text`, if remembered."""
        if "&" in text:
            return None
        key = self.key(text)
        found = self._this_run.get(key) or self._read.get(key)
        if found is None:
            return None
        try:
            documents = tuple(json.loads(fingerprint) for fingerprint in found)
        except ValueError:  # not what this module writes: parse the text
            return None
        self._this_run[key] = found
        return found, documents

    def remember(self, text: str, fingerprints: Sequence[str]) -> None:
        """Note that `text` reads as the documents of `fingerprints` (see the module docstring)."""
        if "&" not in text:
            self._this_run[self.key(text)] = list(fingerprints)

    def save(self) -> None:
        """Write this run's entries, unless the file already holds them all.

        A run that adds none (an unchanged re-run) leaves the file as it is, with the entries it
        no longer needs: the file never grows without being written, and then it holds this
        run's files only.
        """
        if all(self._read.get(key) == value for key, value in self._this_run.items()):
            return
        document = {"format": FORMAT, "files": dict(sorted(self._this_run.items()))}
        write_atomically(self.path, json.dumps(document).encode() + b"\n")


def _is_hash(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and set(value) <= _HEX
