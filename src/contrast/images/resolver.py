"""Resolve the images of a set of workloads to `ImageFacts`, the one entry point `generate` uses.

Resolution runs in two phases on a small thread pool:
1. every distinct reference is located (OCI layouts first, in the order given, then its registry):
   manifest (an index picks linux/amd64), config; all digests checked;
2. every distinct layer not in the layer cache is streamed once, whichever images share it.
Identical references, references that normalise alike, and images sharing layers (or whole
digests) therefore cost one fetch. The cache is saved even when a later image fails, so work done
is not lost.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from contrast.images.auth import DockerConfig
from contrast.images.cache import LayerCache
from contrast.images.layers import LayerFacts, merge_file, read_layer
from contrast.images.layout import OciLayout
from contrast.images.manifest import (
    MAX_DOCUMENT_SIZE,
    ConfigBlob,
    Descriptor,
    Index,
    Manifest,
    parse_manifest,
)
from contrast.images.model import ImageError, ImageFacts
from contrast.images.progress import PullProgress
from contrast.images.reference import ImageReference
from contrast.images.streams import DigestingReader, DigestMismatch, Readable

if TYPE_CHECKING:
    from contrast.images.registry import RegistryClient

LOG = logging.getLogger(__name__)

DEFAULT_WORKERS = 4
_T = TypeVar("_T")
_R = TypeVar("_R")


class ClosableReadable(Readable, AbstractContextManager["ClosableReadable"], Protocol):
    pass


class _BlobStore(Protocol):
    """Where an image's blobs come from: its registry repository or an OCI layout."""

    def open_blob(self, digest: str) -> ClosableReadable: ...


@dataclass(frozen=True)
class _RegistryBlobs:
    client: RegistryClient
    reference: ImageReference

    def open_blob(self, digest: str) -> ClosableReadable:
        return self.client.open_blob(self.reference, digest)

    def __str__(self) -> str:
        return self.reference.name


@dataclass(frozen=True)
class _Located:
    """An image found and checked up to its config: what phase 2 needs to read its layers."""

    reference: ImageReference
    digest: str
    manifest: Manifest
    config: ConfigBlob
    blobs: _BlobStore


class ImageResolver:
    """Turns image strings into facts; one instance per `generate` run."""

    def __init__(
        self,
        *,
        oci_layouts: Sequence[Path] = (),
        insecure_registries: Sequence[str] = (),
        docker_config: Path | None = None,
        cache_path: Path | None = None,
        progress: bool | PullProgress = False,
        workers: int = DEFAULT_WORKERS,
        client: RegistryClient | None = None,
    ) -> None:
        """`docker_config` is a config.json or its directory (default: Docker's location).

        `progress=True` draws a progress line on stderr when it is a terminal.
        """
        self._layouts = [OciLayout(path) for path in oci_layouts]
        self._insecure_registries = insecure_registries
        self._docker_config = DockerConfig.load(docker_config)
        self._client = client
        self._client_lock = threading.Lock()
        self._cache = LayerCache(cache_path)
        if isinstance(progress, PullProgress):
            self._progress = progress
        else:
            self._progress = PullProgress(enabled=None if progress else False)
        self._workers = max(1, workers)

    def resolve(self, references: Iterable[str]) -> dict[str, ImageFacts]:
        """Facts for every reference, keyed by the string exactly as given."""
        given = list(dict.fromkeys(references))
        parsed = {text: ImageReference.from_string(text) for text in given}
        unique = list(dict.fromkeys(parsed.values()))
        with ThreadPoolExecutor(max_workers=self._workers) as pool:
            located = dict(zip(unique, _run_all(pool, self._locate, unique), strict=True))
            try:
                layers = self._read_layers(pool, list(located.values()))
            finally:
                self._cache.save()
        facts: dict[str, ImageFacts] = {}
        for text in given:
            image = located[parsed[text]]
            changes = [layers[diff_id] for diff_id in image.config.diff_ids]
            facts[text] = ImageFacts(
                reference=text,
                digest=image.digest,
                config=image.config.config,
                etc_passwd=merge_file(change.passwd for change in changes),
                etc_group=merge_file(change.group for change in changes),
                compressed_size=sum(layer.size for layer in image.manifest.layers),
                uncompressed_size=sum(change.size for change in changes),
            )
        return facts

    def _registry(self) -> RegistryClient:
        """The registry client, made when an image is not in a layout (threads ask at once).

        Made on first use: with every image in a layout none is needed, nor its HTTP and TLS
        modules and the system's CA certificates, which cost tens of milliseconds at each start.
        """
        with self._client_lock:
            if self._client is None:
                from contrast.images.registry import RegistryClient  # noqa: PLC0415

                self._client = RegistryClient(
                    insecure_registries=self._insecure_registries,
                    docker_config=self._docker_config,
                )
            return self._client

    def _locate(self, reference: ImageReference) -> _Located:
        """Where `reference` is and what it is; errors name the image, since one run has many."""
        try:
            return self._find(reference)
        except ImageError as error:
            if str(reference) in error.message:
                raise
            # Same class, so callers can still tell a registry refusal from a digest mismatch.
            raise type(error)(f"image {reference}: {error.message}", hint=error.hint) from None

    def _find(self, reference: ImageReference) -> _Located:
        for layout in self._layouts:
            entry = layout.find(reference)
            if entry is not None:
                return self._from_store(reference, entry, layout, str(layout))
        client = self._registry()
        blobs = _RegistryBlobs(client, reference)
        document = client.manifest(reference, reference.manifest_reference)
        digest = f"sha256:{hashlib.sha256(document.data).hexdigest()}"
        expected = reference.digest or document.claimed_digest
        if expected is not None and digest != expected:
            raise DigestMismatch(
                f"the manifest of {reference} has digest {digest}, expected {expected}",
                hint="the registry serves different content than the reference pins",
            )
        parsed = parse_manifest(document.data, document.media_type, f"manifest of {reference}")
        if isinstance(parsed, Index):
            platform = parsed.select_platform(f"{reference}")
            inner = client.manifest(reference, platform.digest)
            _check_digest(inner.data, platform.digest, f"linux/amd64 manifest of {reference}")
            parsed = parse_manifest(inner.data, inner.media_type, f"manifest of {reference}")
        return self._finish(reference, digest, parsed, blobs)

    def _from_store(
        self, reference: ImageReference, entry: Descriptor, store: OciLayout, where: str
    ) -> _Located:
        what = f"{reference} in {where}"
        parsed = parse_manifest(_read_document(store, entry, what), entry.media_type, what)
        if isinstance(parsed, Index):
            platform = parsed.select_platform(what)
            parsed = parse_manifest(
                _read_document(store, platform, what), platform.media_type, what
            )
        return self._finish(reference, entry.digest, parsed, store)

    def _finish(
        self,
        reference: ImageReference,
        digest: str,
        parsed: Index | Manifest,
        blobs: _BlobStore,
    ) -> _Located:
        if not isinstance(parsed, Manifest):
            raise ImageError(f"{reference}: the platform entry of its index is another index")
        config_data = _read_document(blobs, parsed.config, f"config of {reference}")
        config = ConfigBlob.from_bytes(config_data, f"{reference}")
        if len(config.diff_ids) != len(parsed.layers):
            raise ImageError(
                f"{reference} has {len(parsed.layers)} layers but its config lists"
                f" {len(config.diff_ids)} diff_ids"
            )
        return _Located(reference, digest, parsed, config, blobs)

    def _read_layers(
        self, pool: ThreadPoolExecutor, images: Sequence[_Located]
    ) -> dict[str, LayerFacts]:
        known: dict[str, LayerFacts] = {}
        wanted: dict[str, tuple[_Located, int]] = {}
        for image in images:
            for position, diff_id in enumerate(image.config.diff_ids):
                cached = self._cache.get(diff_id)
                if cached is not None:
                    known[diff_id] = cached
                elif diff_id not in wanted:
                    wanted[diff_id] = (image, position)
        if not wanted:
            return known
        jobs = list(wanted.items())
        self._progress.start(
            len(jobs), sum(image.manifest.layers[i].size for image, i in wanted.values())
        )
        try:
            for facts in _run_all(pool, self._read_one, jobs):
                known[facts.diff_id] = facts
        finally:
            self._progress.finish()
        return known

    def _read_one(self, job: tuple[str, tuple[_Located, int]]) -> LayerFacts:
        diff_id, (image, position) = job
        descriptor = image.manifest.layers[position]
        what = f"layer {position + 1} of {image.reference}"
        with image.blobs.open_blob(descriptor.digest) as stream:
            facts = read_layer(stream, descriptor, diff_id, what, self._progress.add_bytes)
        self._cache.put(facts)
        self._progress.layer_done()
        return facts


def _read_document(blobs: _BlobStore, descriptor: Descriptor, what: str) -> bytes:
    """A small blob (manifest, config) read whole, its digest and size checked."""
    if descriptor.size > MAX_DOCUMENT_SIZE:
        raise ImageError(f"{what} is {descriptor.size} bytes, larger than any manifest or config")
    with blobs.open_blob(descriptor.digest) as stream:
        reader = DigestingReader(stream, descriptor.digest, what, descriptor.size)
        chunks = []
        while chunk := reader.read(1024 * 1024):
            chunks.append(chunk)
    return b"".join(chunks)


def _check_digest(data: bytes, expected: str, what: str) -> None:
    digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
    if digest != expected:
        raise DigestMismatch(f"{what} has digest {digest}, expected {expected}")


def _run_all(
    pool: ThreadPoolExecutor, function: Callable[[_T], _R], items: Sequence[_T]
) -> list[_R]:
    """Results in order; if any failed, one ImageError naming every failure (first's hint)."""
    futures = [pool.submit(function, item) for item in items]
    results: list[_R] = []
    failures: list[ImageError] = []
    for future in futures:
        try:
            results.append(future.result())
        except ImageError as error:
            failures.append(error)
    if len(failures) == 1:
        raise failures[0]
    if failures:
        raise ImageError(
            f"{len(failures)} images failed: " + "; ".join(str(error) for error in failures),
            hint=failures[0].hint,
        )
    return results
