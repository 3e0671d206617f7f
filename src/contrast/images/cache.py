"""`layers-cache.json`: what was read from each layer, so a layer is downloaded only once.

The file is a JSON array, one object per layer, keyed by `diff_id` like genpolicy's
(research/policy.md §4.4), but it says explicitly what a layer does to each file, because
genpolicy's encoding ('' for absent, the string "WHITEOUT" for deleted) cannot tell an empty
file from no file:

    {"diff_id": "sha256:…", "passwd": "root:x:0:0::/root:/bin/sh\\n" | null,
     "group": … | null, "deleted": ["passwd", "group"], "size": 1234}

`passwd`/`group` is the file's text when the layer writes it, `null` when it does not; `deleted`
lists the files the layer removes from lower layers (whiteouts, opaque `etc`); `size` is the
uncompressed layer size. Entries without `size` (genpolicy's, or malformed ones) are not used, but
are kept when the file is rewritten; unknown fields are ignored.

Several `generate` runs may share one cache (CI matrix jobs, parallel Makefiles): saving takes an
exclusive `fcntl` lock on a sibling `.lock` file (removed again afterwards), re-reads the file,
merges and replaces it atomically, so no run loses another's entries. Readers need no lock: the
file is only ever replaced whole. A cache that cannot be read is reported as a warning and
rebuilt, never fatal. The cache is trusted input: a tampered entry changes the users a policy
allows (as upstream warns).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from contrast.boundedfile import FileTooLarge, read_bounded
from contrast.files import exclusive_lock, write_atomically
from contrast.images.layers import FILES, LayerFacts, LayerFile
from contrast.images.reference import is_sha256_digest

LOG = logging.getLogger(__name__)
# An entry is a few hundred bytes (a layer's passwd and group): 64 MiB is a hundred thousand
# layers. A larger file is read no further, warned about and rebuilt, like an unreadable one.
MAX_BYTES = 64 << 20


class LayerCache:
    """The layer facts of one cache file, plus what this run learned; thread-safe."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._known: dict[str, LayerFacts] = {}
        self._learned: dict[str, LayerFacts] = {}
        if path is not None:
            for raw in _read_entries(path):
                facts = _parse_entry(raw)
                if facts is not None:
                    self._known[facts.diff_id] = facts

    def get(self, diff_id: str) -> LayerFacts | None:
        with self._lock:
            return self._learned.get(diff_id) or self._known.get(diff_id)

    def put(self, facts: LayerFacts) -> None:
        with self._lock:
            self._learned[facts.diff_id] = facts

    def save(self) -> None:
        """Merge this run's entries into the file under the lock; no-op without news."""
        if self.path is None:
            return
        with self._lock:
            learned = dict(self._learned)
        if not learned:
            return
        with exclusive_lock(self.path.with_name(self.path.name + ".lock")):
            on_disk = _read_entries(self.path)
            merged: dict[str, Any] = {}
            for raw in on_disk:
                diff_id = raw.get("diff_id")
                if isinstance(diff_id, str):
                    merged[diff_id] = raw
            before = dict(merged)
            for diff_id, facts in learned.items():
                merged[diff_id] = _entry(facts)
            if merged != before or len(on_disk) != len(before):
                document = [merged[key] for key in sorted(merged)]
                text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
                write_atomically(self.path, text.encode())


def _read_entries(path: Path) -> list[dict[str, Any]]:
    """The objects of the cache file; [] (with a warning) when it is missing or unreadable."""
    try:
        document = json.loads(read_bounded(path, MAX_BYTES, what="the layer cache"))
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, FileTooLarge) as error:
        LOG.warning("layer cache %s cannot be read (%s); it will be rebuilt", path, error)
        return []
    if not isinstance(document, list):
        LOG.warning("layer cache %s is not a JSON array; it will be rebuilt", path)
        return []
    return [entry for entry in document if isinstance(entry, dict)]


def _parse_entry(raw: Mapping[str, Any]) -> LayerFacts | None:
    diff_id = raw.get("diff_id")
    size = raw.get("size")
    deleted = raw.get("deleted", [])
    if (
        not isinstance(diff_id, str)
        or not is_sha256_digest(diff_id)
        or not isinstance(size, int)
        or isinstance(size, bool)
        or size < 0
        or not isinstance(deleted, list)
    ):
        return None
    files: dict[str, LayerFile] = {}
    for name in FILES:
        content = raw.get(name)
        if content is not None and not isinstance(content, str):
            return None
        files[name] = LayerFile(content=content, deleted=name in deleted)
    return LayerFacts(diff_id=diff_id, passwd=files["passwd"], group=files["group"], size=size)


def _entry(facts: LayerFacts) -> dict[str, Any]:
    changes = {"passwd": facts.passwd, "group": facts.group}
    return {
        "diff_id": facts.diff_id,
        "passwd": facts.passwd.content,
        "group": facts.group.content,
        "deleted": [name for name in FILES if changes[name].deleted],
        "size": facts.size,
    }
