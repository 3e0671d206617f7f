"""The runtime hashes of the shipped runtime descriptions, written down, and when to trust them.

Every `contrast generate` names the runtime class of each pod `contrast-cc-<platform>-<hash>`.
Deriving the hash means validating the platform's runtime description with its pydantic model
(`nodeinstaller/runtime.py`), and importing pydantic and building those models is a sixth of
`generate`'s start. The hash is a function of two inputs only: the description's bytes and the
digest of the node installer's Python files (which hold `runtime_digest` itself). So
`nodeinstaller/runtime-hashes.json`, shipped beside the descriptions, records for each platform
the SHA-256 of both and the hash they give; a recorded hash is used only when both inputs are
byte for byte the recorded ones, and anything else (a changed description, a changed installer,
no entry) derives the hash as before.

The digest is computed here as `runtime.installer_source_digest` computes it (a test holds the
two equal): this module lives outside the node installer because any change to its Python files
changes every runtime hash, and so every runtime class name `generate` writes.

`write()` makes the file (`python -m contrast.runtimehashes`); tests/test_runtimehashes.py fails
when it is out of date.
"""

from __future__ import annotations

import functools
import hashlib
import json
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

FILE_NAME = "runtime-hashes.json"


def _package() -> Traversable:
    return resources.files("contrast.nodeinstaller")


def _source_files(folder: Traversable, prefix: str = "") -> list[tuple[str, bytes]]:
    files: list[tuple[str, bytes]] = []
    for entry in folder.iterdir():
        name = f"{prefix}{entry.name}"
        if entry.is_dir():
            if entry.name != "__pycache__":
                files.extend(_source_files(entry, f"{name}/"))
        elif entry.name.endswith(".py"):
            files.append((name, entry.read_bytes()))
    return files


@functools.cache
def installer_source_digest() -> str:
    """`nodeinstaller.runtime.installer_source_digest()`, without importing that module."""
    lines = sorted(
        f"{hashlib.sha256(data).hexdigest()}  {name}" for name, data in _source_files(_package())
    )
    return hashlib.sha256("".join(f"{line}\n" for line in lines).encode()).hexdigest()


def description_bytes(platform_name: str) -> bytes | None:
    """The shipped runtime description of a platform, or None if there is none."""
    entry = _package() / "runtimes" / f"{platform_name}.json"
    return entry.read_bytes() if entry.is_file() else None


def _inputs(description: bytes) -> dict[str, str]:
    return {
        "description_sha256": hashlib.sha256(description).hexdigest(),
        "installer_digest": installer_source_digest(),
    }


def recorded(platform_name: str) -> str | None:
    """The recorded hash of a platform's runtime, if its inputs are the recorded ones."""
    description = description_bytes(platform_name)
    entry = _entries().get(platform_name)
    if description is None or not isinstance(entry, dict):
        return None
    if {key: entry.get(key) for key in ("description_sha256", "installer_digest")} != _inputs(
        description
    ):
        return None
    value = entry.get("hash")
    return value if isinstance(value, str) else None


@functools.cache
def _entries() -> dict[str, Any]:
    try:
        document = json.loads((_package() / FILE_NAME).read_bytes())
    except (OSError, ValueError):  # none shipped, or damaged: every hash is derived
        return {}
    return document if isinstance(document, dict) else {}


def entries() -> dict[str, dict[str, str]]:
    """What the file should hold: every shipped description's inputs and derived hash."""
    from contrast.nodeinstaller.runtime import load_runtime, runtime_hash_of  # noqa: PLC0415

    found: dict[str, dict[str, str]] = {}
    for entry in sorted((_package() / "runtimes").iterdir(), key=lambda item: item.name):
        if not entry.name.endswith(".json"):
            continue
        name = entry.name.removesuffix(".json")
        found[name] = {
            **_inputs(entry.read_bytes()),
            "hash": runtime_hash_of(load_runtime(name)),
        }
    return found


def write(path: Path | None = None) -> Path:
    """Write the file (into the source tree by default)."""
    target = path or Path(__file__).parent / "nodeinstaller" / FILE_NAME
    target.write_text(json.dumps(entries(), indent=2, sort_keys=True) + "\n")
    return target


if __name__ == "__main__":  # pragma: no cover - the maintainers' command
    print(f"wrote {write()}")
