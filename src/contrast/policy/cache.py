"""Policies of the previous `generate` run, reused when every byte they came from is the same.

An unchanged re-run derived every policy again (most of its time) only to write the annotation
each pod already carries. The cache (`policy-cache.json` in the workspace) maps a key to the
sha256 of the annotation that run wrote and its policy hash. The key covers every byte the
derivation reads: the cache format and the tool's version, the code that derives policies
(`CODE`, hashed), the rules, the settings, the ConfigMaps and Secrets (environment sources),
and per workload its resource and the facts of each image it runs (`dataclasses.asdict`: every
field). A hit is taken only when the pod already carries an annotation with exactly the recorded
sha256, so the annotation reused is byte for byte the one derived from the same inputs; otherwise
the policy is derived. The name of the file a workload is in is read only for error messages, and
a derivation that fails is never cached, so it is not keyed: a moved workspace keeps its cache.

The initdata annotation itself is left out of the key, because the derivation does not read it
(containers.py drops it from the annotations it describes; tests/policy/test_cache.py shows the
policy is the same with, without and with another annotation), so that a re-run finds the
entries the first run wrote and the file stays unchanged. A resource that names the annotation
anywhere else (a downward-API `fieldRef` could hand its value to a container's environment)
keeps it in its key. The file holds the entries of the last run only (bounded by its workloads);
one that cannot be read or has another shape is ignored, never an error.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import contrast
from contrast.boundedfile import FileTooLarge, read_bounded
from contrast.boundedjson import JsonInputError, JsonLimits, load
from contrast.files import write_atomically
from contrast.images import model as model_module
from contrast.images.model import ImageFacts
from contrast.kuberesource import workloads as workloads_module
from contrast.kuberesource.workloads import POD_TEMPLATE_PATHS, Workload, workloads
from contrast.kuberesource.yamlio import to_plain
from contrast.policy.initdata import ANNOTATION
from contrast.policy.settings import Settings

FORMAT = 1
FILE = "policy-cache.json"
# A cache of this many entries (two hashes each) is about 20 MB: larger files are ignored.
LIMITS = JsonLimits(max_bytes=20 * 1024 * 1024, max_depth=4)
_HEX = frozenset("0123456789abcdef")


def _code_digest() -> str:
    """sha256 of what derives policies besides its inputs: this package's sources and assets,
    the modules it reads workloads and image facts with, Python's and zlib's versions."""
    policy = Path(__file__).parent
    files = sorted(
        [*policy.glob("*.py"), *(p for p in (policy / "assets").rglob("*") if p.is_file())]
    )
    files += [Path(workloads_module.__file__), Path(model_module.__file__)]
    hashed = hashlib.sha256(f"{sys.version}\0{zlib.ZLIB_RUNTIME_VERSION}\0".encode())
    for path in files:
        hashed.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return hashed.hexdigest()


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8", "surrogatepass"
    )


class PolicyCache:
    """The entries read from `path` and those this run used or made; `save()` keeps the latter."""

    def __init__(
        self,
        path: Path,
        rules: str,
        settings: Settings,
        config_resources: Sequence[Mapping[str, Any]],
    ) -> None:
        self.path = path
        self._read = self._load(path)
        self._used: dict[str, tuple[str, str]] = {}
        # Each image's part of the keys, by name, with the facts object it was made from: a run
        # has a few images and many workloads running each.
        self._facts: dict[str, tuple[ImageFacts, bytes]] = {}
        run = hashlib.sha256()
        for part in (
            _canonical([FORMAT, contrast.__version__, _code_digest()]),
            rules.encode("utf-8", "surrogatepass"),
            _canonical(settings.document),
            _canonical([to_plain(resource) for resource in config_resources]),
        ):
            run.update(hashlib.sha256(part).digest())
        self._run = run

    @staticmethod
    def _load(path: Path) -> dict[str, tuple[str, str]]:
        try:
            data = read_bounded(path, LIMITS.max_bytes, what="the policy cache")
            document = load(data, LIMITS, what=str(path))
        except (OSError, JsonInputError, FileTooLarge):
            return {}
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            return {}
        entries = document.get("entries")
        if not isinstance(entries, dict):
            return {}
        return {
            key: (value[0], value[1])
            for key, value in entries.items()
            if isinstance(value, list) and len(value) == 2 and all(map(_is_hash, [key, *value]))
        }

    def key(self, workload: Workload, images: Mapping[str, ImageFacts], used: set[str]) -> str:
        """The key of `workload`'s policy from the images `used` (every image it runs)."""
        resource, template = _copied_to_annotations(workload)
        annotation = _without_initdata(template)
        text = _canonical(resource)
        if ANNOTATION.encode() in text:  # named elsewhere: it may be read, so it is keyed
            text += b"\0" + _canonical(annotation)
        # The canonical JSON list of [image, facts] pairs, of parts made once per image.
        facts = b",".join(self._image_part(image, images[image]) for image in sorted(used))
        hashed = self._run.copy()
        for part in (text, b"[" + facts + b"]"):
            hashed.update(hashlib.sha256(part).digest())
        return hashed.hexdigest()

    def _image_part(self, image: str, facts: ImageFacts) -> bytes:
        """`_canonical([image, every field of facts])`, made once per image and run."""
        known = self._facts.get(image)
        if known is None or known[0] is not facts:
            known = self._facts[image] = (facts, _canonical([image, dataclasses.asdict(facts)]))
        return known[1]

    def lookup(self, key: str, annotation: Any) -> str | None:
        """The policy hash for `key` if `annotation` is the very one derived for it, else None."""
        entry = self._read.get(key) or self._used.get(key)
        if entry is None or not isinstance(annotation, str):
            return None
        if hashlib.sha256(annotation.encode("utf-8", "surrogatepass")).hexdigest() != entry[0]:
            return None
        self._used[key] = entry
        return entry[1]

    def store(self, key: str, annotation: str, policy_hash: str) -> None:
        digest = hashlib.sha256(annotation.encode("utf-8", "surrogatepass")).hexdigest()
        self._used[key] = (digest, policy_hash)

    def save(self) -> None:
        """Write this run's entries, if they differ from what was read."""
        if self._used == self._read:
            return
        document = {
            "format": FORMAT,
            "entries": {key: list(value) for key, value in sorted(self._used.items())},
        }
        write_atomically(self.path, json.dumps(document, indent=1).encode() + b"\n")


def written_annotations(path: Path) -> dict[str, str]:
    """The policy hash (hex) of each annotation the last `generate` run wrote or kept, by the
    annotation's sha256 (hex), from the cache at `path`; empty where it cannot be read.

    An entry's annotation is the one `generate` encoded for that hash, so `set` can take its
    policy hash from here instead of reading and hashing the document again (client/resources.py).
    """
    return dict(PolicyCache._load(path).values())


def _is_hash(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and set(value) <= _HEX


def _copied_to_annotations(workload: Workload) -> tuple[Any, Any]:
    """The resource as its key reads it, and its pod template, where that key may change them.

    `_without_initdata` edits the template, so the key reads a copy. For a plain resource (read
    by `yamlfast`: dicts, lists, str, int, float, bool, None) only the dicts on the way to the
    template's annotations are copied, the rest is shared and only read: copying the whole
    resource with `to_plain` took a fifth of a millisecond a workload, and the JSON is the same.
    Any other resource (read by ruamel) is copied whole, as plain values.
    """
    path = POD_TEMPLATE_PATHS.get(workload.kind)
    if type(workload.resource) is dict and path is not None:
        copy = node = dict(workload.resource)
        nodes = [copy]
        for key in (*path, "metadata", "annotations"):
            child = node.get(key)
            if type(child) is not dict:
                break
            node[key] = node = dict(child)
            nodes.append(node)
        if len(nodes) > len(path):  # the template was reached
            return copy, nodes[len(path)]
    resource = to_plain(workload.resource)
    (twin,) = workloads([resource], workload.source)
    return resource, twin.pod_template


def _without_initdata(template: dict[str, Any] | Any) -> Any:
    """Remove the initdata annotation from a pod template (a copy), returning its value.

    A mapping left empty goes too: a missing, null or empty `annotations` (or `metadata`)
    describe the same pod, and the first run saw the template before it had the annotation.
    """
    metadata = template.get("metadata")
    if not isinstance(metadata, dict):
        return None
    annotations = metadata.get("annotations")
    annotation = annotations.pop(ANNOTATION, None) if isinstance(annotations, dict) else None
    if not annotations:
        metadata.pop("annotations", None)
    if not metadata:
        template.pop("metadata", None)
    return annotation
