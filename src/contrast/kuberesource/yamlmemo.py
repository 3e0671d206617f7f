"""The plain documents of the resource files `generate` read or wrote, known by their text.

An unchanged re-run reads back the files the previous run wrote, and parsing them was the
largest part of its time left: libyaml's events and PyYAML's constructor take 2-2.5 ms for a
generated workload file (most of it a 16 KB initdata annotation), where reading the same content
as JSON takes 0.1 ms. So `yaml-cache.txt` in the workspace maps the sha256 of a file's text to
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

Its format is lines, not one JSON document: a first line `contrast-yaml-cache 2`, then per
entry a line `<key> <number of documents>` followed by that many lines, each a fingerprint as
it is (compact JSON never holds a newline), and a last line `end`. Reading it is one split: as
JSON, every fingerprint was a string with each quote escaped, and parsing those took 86 ms for
a thousand generated files, most of a run's reading.
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

FORMAT = 2
FILE = "yaml-cache.txt"
_HEADER = f"contrast-yaml-cache {FORMAT}"
_END = "end"
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
        self._data, self._index = self._load(path)
        self._decoded: dict[str, list[str]] = {}  # entries of the file, read out on first use
        self._this_run: dict[str, list[str]] = {}

    @staticmethod
    def _load(path: Path) -> tuple[bytes, dict[str, tuple[int, int, int]]]:
        """The file's bytes and where each entry's fingerprints are in them (`_index`)."""
        try:
            with path.open("rb") as source:
                data = source.read(MAX_BYTES + 1)
        except OSError:
            return b"", {}
        if len(data) > MAX_BYTES:
            return b"", {}
        index = _index(data)
        return (data, index) if index else (b"", {})

    def _stored(self, key: str) -> list[str] | None:
        """The fingerprints the file holds for `key`, None if none or not UTF-8 (not what this
        module writes). Only the entries used are decoded: a run that generates anew reads the
        files it was given, not the larger ones it wrote."""
        found = self._decoded.get(key)
        if found is None and key in self._index:
            start, end, count = self._index[key]
            try:
                text = self._data[start:end].decode("utf-8", "surrogatepass")
            except UnicodeDecodeError:
                return None
            found = self._decoded[key] = text.split("\n") if count else []
        return found

    def key(self, text: str) -> str:
        data = text.encode("utf-8", "surrogatepass")
        return hashlib.sha256(self._code + b"\0" + data).hexdigest()

    def lookup(self, text: str) -> tuple[list[str], tuple[Any, ...]] | None:
        """The fingerprints and plain documents of a file whose text is `text`, if remembered."""
        if "&" in text:
            return None
        key = self.key(text)
        found = self._this_run.get(key)
        if found is None:
            found = self._stored(key)
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
        # A fingerprint is compact JSON, without a newline: anything else cannot be a line.
        if "&" not in text and not any("\n" in fingerprint for fingerprint in fingerprints):
            self._this_run[self.key(text)] = list(fingerprints)

    def save(self) -> None:
        """Write this run's entries, unless the file already holds them all.

        A run that adds none (an unchanged re-run) leaves the file as it is, with the entries it
        no longer needs: the file never grows without being written, and then it holds this
        run's files only.
        """
        if all(self._stored(key) == value for key, value in self._this_run.items()):
            return
        lines = [_HEADER]
        for key, fingerprints in sorted(self._this_run.items()):
            lines.append(f"{key} {len(fingerprints)}")
            lines.extend(fingerprints)
        lines += [_END, ""]
        write_atomically(self.path, "\n".join(lines).encode("utf-8", "surrogatepass"))


def _index(data: bytes) -> dict[str, tuple[int, int, int]]:
    """Each entry's key → (start, end, count) of its fingerprints' lines in `data` (without the
    last newline); empty if `data` is not what this module writes (see the module docstring).

    Found with one `find` a line, without copying or decoding anything: 4 ms for 19 MB.
    """
    header = data.find(b"\n")
    ending = b"\n" + _END.encode() + b"\n"
    if data[:header] != _HEADER.encode() or not data.endswith(ending):
        return {}
    last = len(data) - len(ending) + 1  # where the `end` line begins
    entries: dict[str, tuple[int, int, int]] = {}
    position = header + 1
    while position < last:
        line_end = data.find(b"\n", position)
        key, _, count = data[position:line_end].decode("ascii", "replace").partition(" ")
        if not _is_hash(key) or not count.isdecimal():
            return {}
        start = end = line_end + 1
        for _ in range(int(count)):
            end = data.find(b"\n", end) + 1
            if end == 0 or end > last:
                return {}  # cut short
        entries[key] = (start, end - 1, int(count))
        position = end
    return entries if position == last else {}


def _is_hash(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and set(value) <= _HEX
