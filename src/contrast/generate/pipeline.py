"""`contrast generate`: plain Kubernetes YAML in, confidential workloads and their manifest out.

The steps follow the original's pipeline (research/contrast.md §6.2): read the resources, resolve
each pod's runtime class to a platform, inject the Initializer and the service-mesh sidecar,
replace images (`--image-replacements`), read the images, derive a Kata agent policy per pod and
put its initdata into the pod annotation, then write the manifest that admits exactly these
policies on exactly these platforms. The resources and the manifest are written only after
everything was computed, so a failure (a missing image, a malformed annotation) leaves them as
they were; every file is replaced atomically. A second run over its own output changes nothing.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from ruamel.yaml.scalarbool import ScalarBoolean

from contrast.boundedfile import FileTooLarge, read_bounded
from contrast.files import write_atomically
from contrast.generate import manifest as manifest_document
from contrast.generate import parallel, release_images
from contrast.generate.errors import GenerateError
from contrast.generate.keys import prepare_owner_keys
from contrast.generate.manifest import WorkloadIdentity
from contrast.generate.references import ReferenceValueProvider
from contrast.generate.staging import StagedWrites
from contrast.images.layout import OciLayout
from contrast.images.model import ImageFacts
from contrast.images.reference import ImageReference
from contrast.images.resolver import ImageResolver
from contrast.kuberesource import (
    checks,
    debugshell,
    imagestore,
    inject,
    knownannotations,
    runtimeclass,
    schema,
    yamlio,
)
from contrast.kuberesource.imagereplace import ImageReplacements
from contrast.kuberesource.schemacache import SchemaCache
from contrast.kuberesource.workloads import Workload, workloads
from contrast.kuberesource.yamlmemo import YamlMemo
from contrast.manifest.errors import ManifestError
from contrast.manifest.model import MANIFEST_LIMITS, Manifest, ReferenceValues
from contrast.platforms import Platform
from contrast.policy import settings as policy_settings
from contrast.policy.cache import PolicyCache
from contrast.policy.engine import PolicyLoadError, check_rules
from contrast.policy.generate import PolicyGenerator, default_rules
from contrast.policy.initdata import ANNOTATION
from contrast.policy.settings import Settings

CONFIG_KINDS = {"ConfigMap", "Secret"}
# `rules.rego` is read whole (`contrast.boundedfile`): the default rules are about 100 KiB.
TEXT_MAX_BYTES = 16 << 20


@dataclass(frozen=True)
class Options:
    """What the user asked for; paths are already resolved against the workspace."""

    paths: tuple[Path, ...]
    rules: Path
    settings: Path
    layers_cache: Path
    manifest: Path
    workload_owner_keys: tuple[Path, ...]
    seedshare_owner_keys: tuple[Path, ...]
    # Whether missing keys are created: (workload owner keys, seed share owner keys).
    create_keys: bool | tuple[bool, bool] = True
    platform: Platform | None = None
    disable_updates: bool = False
    seedshare_threshold: int = 1
    skip_initializer: bool = False
    skip_service_mesh: bool = False
    # The original's --insecure-enable-debug-shell-access (kuberesource/debugshell.py).
    insecure_debug_shell: bool = False
    # The original's --inject-image-store (kuberesource/imagestore.py).
    inject_image_store: bool = False
    image_replacements: ImageReplacements = field(default_factory=ImageReplacements)
    oci_layouts: tuple[Path, ...] = ()
    insecure_registries: tuple[str, ...] = ()
    emulated_tee: Path | None = None
    reference_values_file: Path | None = None
    output: Path | None = None
    progress: bool = False
    # Policies of the previous run (policy/cache.py); None derives every policy.
    policy_cache: Path | None = None
    # Resources that passed the schema check in the previous run (kuberesource/schemacache.py);
    # None checks every resource.
    schema_cache: Path | None = None
    # The documents of the files read and written, by their text (kuberesource/yamlmemo.py).
    yaml_cache: Path | None = None


@dataclass
class Result:
    """What a run did, for the CLI to report."""

    written: list[Path] = field(default_factory=list)
    unchanged: list[Path] = field(default_factory=list)
    warnings: list[checks.CheckWarning] = field(default_factory=list)
    missing_reference_values: list[str] = field(default_factory=list)
    policies: dict[str, str] = field(default_factory=dict)  # workload → policy hash
    platforms: tuple[str, ...] = ()


@dataclass(frozen=True)
class _WorkspaceText:
    """`rules.rego` or `settings.json`: the user's copy, or the default to write on success."""

    path: Path
    text: str
    new: bool

    @classmethod
    def read(cls, path: Path, default: str, what: str) -> _WorkspaceText:
        if not path.exists():
            return cls(path, default, new=True)
        try:
            data = read_bounded(
                path,
                TEXT_MAX_BYTES,
                what=f"the {what}",
                hint=f"remove it to get the default {what}",
            )
            return cls(path, data.decode(), new=False)
        except (OSError, UnicodeDecodeError) as error:
            raise GenerateError(f"cannot read the {what} {path}: {error}") from None


def _rules(path: Path, cache: SchemaCache | None) -> _WorkspaceText:
    """The rules, parsed now: an error in them would otherwise be baked into every policy.

    Rules that passed before, byte for byte, are not parsed again (`cache`).
    """
    rules = _WorkspaceText.read(path, default_rules(), "policy rules")

    def check() -> None:
        try:
            check_rules(rules.text, str(path))
        except PolicyLoadError as error:
            raise GenerateError(
                error.message,
                hint=error.hint
                or "fix the Rego there, or remove the file to get the default rules",
            ) from None

    _check_once(cache, "rules", rules.text.encode("utf-8", "surrogatepass"), check)
    return rules


def _check_once(
    cache: SchemaCache | None, check: str, data: bytes, run: Callable[[], None]
) -> None:
    """`run()` the check of an input, unless `cache` holds that the same bytes passed it."""
    key = None if cache is None else cache.input_key(check, data)
    if cache is None or not cache.passed(key):
        run()
    if cache is not None:
        cache.record(key)


def _settings(path: Path) -> tuple[_WorkspaceText | None, Settings]:
    """The settings (a file, or a directory with drop-ins), or the defaults to write."""
    if path.exists():
        return None, policy_settings.load_settings(path)
    default = _WorkspaceText(path, policy_settings.default_settings_text(), new=True)
    return default, Settings.from_text(default.text, str(path))


def _previous_manifest(path: Path, cache: SchemaCache | None) -> Manifest | None:
    """The manifest to start from, refused unless it is a manifest (a draft will do).

    Generate replaces the file, keeping only its reference values; a file that is not a
    manifest (another tool's JSON, a typo in a field name) must not be replaced by one. A file
    that passed this check before, byte for byte, is not checked again (`cache`): its entries'
    reference values are not parsed, which would load the modules of every TEE.
    """
    if not path.exists():
        return None
    problem = "fix or remove it; generate keeps its reference values"
    try:
        data = read_bounded(path, MANIFEST_LIMITS.max_bytes, what="the existing manifest")
    except OSError as error:
        raise GenerateError(f"cannot read the existing manifest {path}: {error}") from None
    except FileTooLarge as error:
        raise GenerateError(error.message, hint=problem) from None
    checked: list[Manifest] = []

    def check() -> None:
        checked.append(_read_manifest(data, path, problem, checked=False))

    _check_once(cache, "manifest", data, check)
    return checked[0] if checked else _read_manifest(data, path, problem, checked=True)


def _read_manifest(data: bytes, path: Path, problem: str, *, checked: bool) -> Manifest:
    try:
        return Manifest.from_bytes(data, draft=True, checked=checked)
    except ManifestError as error:
        raise GenerateError(f"cannot use the existing {path}: {error}", hint=problem) from None


def _holds(path: Path, data: bytes) -> bool:
    """Whether the file at `path` holds `data`: read no further than that."""
    try:
        return read_bounded(path, len(data), what="the manifest") == data
    except (OSError, FileTooLarge):
        return False


def _record_manifest(data: bytes, cache: SchemaCache | None) -> None:
    """Check the manifest generate writes, only to record that it passes: the next run reads it.

    Like `_record_schemas`: a manifest that does not pass is not recorded (the next run, which
    checks it as its input, reports it); this run is not refused for it.
    """
    if cache is None:
        return

    def check() -> None:
        Manifest.from_bytes(data, draft=True)

    with contextlib.suppress(ManifestError):
        _check_once(cache, "manifest", data, check)


def _kind(document: Mapping[str, Any]) -> str:
    kind = document.get("kind")
    return kind if isinstance(kind, str) else ""


def _kind_of_value(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool | ScalarBoolean):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "a value"


def _not_objects(files: Sequence[yamlio.ResourceFile]) -> list[checks.CheckWarning]:
    """Documents that are lists or scalars: no Kubernetes object, so generate skips them."""
    return [
        checks.CheckWarning(
            f"{file.name}: document {number}",
            f"{_kind_of_value(document)}, not a Kubernetes object; generate leaves it as it is",
            "remove it, or make it a resource with apiVersion and kind",
        )
        for file in files
        for number, document in enumerate(file.documents, start=1)
        if document is not None and not isinstance(document, Mapping)
    ]


def _reference_values(path: Path | None) -> dict[str, Any] | None:
    """The reference values by runtime handler from `path` (None: the ones built in)."""
    if path is None:
        return None
    # Imported here, as below: the real platforms' defaults are not needed without this file.
    from contrast.manifest.defaults import load_embedded  # noqa: PLC0415

    try:
        return load_embedded(path)
    except ManifestError as error:
        raise GenerateError(f"{path}: {error.message}", hint=error.hint) from None


def _handlers(embedded: Mapping[str, Any]) -> dict[Platform, str]:
    """The handler of each platform whose runtime the reference values name (a built one)."""
    from contrast.manifest.defaults import handlers_in  # noqa: PLC0415

    try:
        return handlers_in(embedded)
    except ManifestError as error:
        raise GenerateError(error.message, hint=error.hint) from None


def _identity(workload: Workload, policy_hash: str) -> WorkloadIdentity:
    return WorkloadIdentity(
        policy_hash=policy_hash,
        name=workload.name or workload.generate_name,
        workload_secret_id=workload.workload_secret_id,
        role=workload.role,
        source=workload.describe(),
    )


def _in_layouts(image: str, layouts: Sequence[Path]) -> bool:
    if not layouts:
        return False
    reference = ImageReference.from_string(image)
    return any(OciLayout(layout).find(reference) is not None for layout in layouts)


def _release_facts(replacements: ImageReplacements) -> dict[str, ImageFacts]:
    """The release images' facts, also under the names `--image-replacements` gives them.

    A replacement of a release image is taken to be the same image under another name (a mirror),
    so it is described as the release image is, without asking a registry: a mirror works where
    the original does, also air-gapped. A replacement that differs (an own build with another
    config) would be described wrongly, by the release image's config and digest.
    """
    known = dict(release_images.known_images())
    for image, replacement in replacements.table.items():
        if image in known and replacement not in known:
            known[replacement] = replace(known[image], reference=replacement)
    return known


@dataclass
class _Edit:
    """What generate changes in one confidential workload, so that it can be made twice.

    The resources are read plain (`yamlio.load_paths(plain=True)`); a document that changes is
    parsed again with ruamel's round-trip loader, which keeps its comments and style, and gets
    the same changes (`_repeat_on_round_trips`).
    """

    platform: Platform
    handler: str | None
    coordinator_namespace: str
    options: Options
    annotation: str | None = None

    def place(self, workload: Workload) -> None:
        runtimeclass.set_runtime_class(workload, self.platform, self.handler)
        inject.inject(
            workload,
            coordinator_namespace=self.coordinator_namespace,
            skip_initializer=self.options.skip_initializer,
            skip_service_mesh=self.options.skip_service_mesh,
            emulated=self.platform.emulated,
        )
        if self.options.insecure_debug_shell:
            debugshell.inject(workload)
        else:
            debugshell.remove(workload)
        if self.options.inject_image_store:
            imagestore.inject(workload)
        else:
            imagestore.remove(workload)
        # After injection, so that the Initializer and the sidecar are replaced too; before the
        # policy, which then describes the images the pod will run.
        self.options.image_replacements.replace_in(workload)

    def annotate(self, workload: Workload, annotation: str) -> None:
        self.annotation = annotation
        workload.pod_annotations[ANNOTATION] = annotation

    def repeat(self, workload: Workload) -> None:
        self.place(workload)
        if self.annotation is not None:
            workload.pod_annotations[ANNOTATION] = self.annotation


def _repeat_on_round_trips(
    file: yamlio.ResourceFile, edits: Mapping[int, _Edit], changed: Sequence[int]
) -> None:
    """Make each changed plain document's edits on its round-trip form, which is what is written.

    `changed`: the indices of the changed documents (`file.changed_documents()`).
    """
    if not file.plain:
        return
    for index in changed:
        plain = workloads([file.documents[index]], file.name)
        round_trip = workloads([file.round_trip(index)], file.name)
        for workload, twin in zip(plain, round_trip, strict=True):
            edit = edits.get(id(workload.resource))
            if edit is not None:
                edit.repeat(twin)


def _placed_in(file: yamlio.ResourceFile, edits: Mapping[int, _Edit]) -> list[Workload]:
    """The workloads of `file` that generate placed (those `edits` holds), in order."""
    return [workload for workload in file.workloads() if id(workload.resource) in edits]


class _Derived(NamedTuple):
    """What `_policies_and_texts` found for the placed workloads, in the order they were placed."""

    policies: list[tuple[str, str]]  # (initdata annotation, policy hash)
    warnings: list[list[checks.CheckWarning]]  # `checks.check`'s
    written: list[yamlio.ResourceFile]  # the files that changed, their texts serialised


class _FileAnswer(NamedTuple):
    """A worker's answer for one file (see `_policies_and_texts`)."""

    derived: list[tuple[str, str]]  # of the file's workloads that lacked a policy, in order
    keys: list[str]  # their policy-cache keys (made here where the parent had none)
    warnings: list[list[checks.CheckWarning]]  # of the file's placed workloads, in order
    content: str  # `ResourceFile.dumped()`: "" if the file did not change
    text: str


def _policies_and_texts(
    files: Sequence[yamlio.ResourceFile],
    placed: Sequence[tuple[Workload, Platform]],
    *,
    edits: Mapping[int, _Edit],
    generator: PolicyGenerator,
    images: Mapping[str, ImageFacts],
    config_resources: Sequence[Mapping[str, Any]],
    cache: PolicyCache | None,
    on_text: Callable[[yamlio.ResourceFile, str, str], None] | None = None,
) -> _Derived:
    """Each placed workload's (initdata annotation, policy hash), annotated on it, the checks'
    warnings about it, and the files that changed, their texts serialised.

    A policy comes from the cache where the pod already carries the annotation derived from the
    same inputs; the others are derived. Deriving policies and writing changed documents back
    (ruamel's round trip) are most of a run, so both happen in one pass on all cores, a file
    per item: the worker derives the policies its file lacks, annotates them, checks the file's
    workloads, repeats the edits on the round-trip forms of the changed documents and writes
    the text, which the file here then adopts for `write()` (one pool instead of two: starting
    one costs ~25 ms), and hands to `on_text` as soon as it arrives (`staging`: written beside
    the file while the rest runs). A pod without an annotation cannot hit the cache, so the
    worker that derives its policy also makes its cache key; the checks of a file no worker
    takes are made here.
    """
    run = _PolicyPass(edits, generator, images, config_resources, cache, on_text)
    run.reuse_cached(placed)
    run.find_missing(files)
    parallel.map_in_processes(run.derive_and_write, run.items, on_result=run.take)
    return run.collect(placed)


@dataclass
class _PolicyPass:
    """The state `_policies_and_texts` carries from one phase to the next.

    Its `derive_and_write` runs in forked workers (`parallel`), which inherit this object as it
    is when they start; what they change stays in them, and only their `_FileAnswer`s come back,
    to `take` here. Workloads are known by `id(workload.resource)`, as in `edits`.
    """

    edits: Mapping[int, _Edit]
    generator: PolicyGenerator
    images: Mapping[str, ImageFacts]
    config_resources: Sequence[Mapping[str, Any]]
    cache: PolicyCache | None
    on_text: Callable[[yamlio.ResourceFile, str, str], None] | None
    keys: dict[int, str] = field(default_factory=dict)  # policy-cache keys
    policies: dict[int, tuple[str, str]] = field(default_factory=dict)
    missing: dict[int, list[Workload]] = field(default_factory=dict)  # by id(file)
    items: list[yamlio.ResourceFile] = field(default_factory=list)  # the files workers take
    checked: dict[int, list[checks.CheckWarning]] = field(default_factory=dict)
    changed: list[yamlio.ResourceFile] = field(default_factory=list)

    def reuse_cached(self, placed: Sequence[tuple[Workload, Platform]]) -> None:
        """Take the policies the cache holds for the annotations the pods already carry."""
        cache = self.cache
        for workload, _ in placed:
            annotation = workload.pod_annotation(ANNOTATION)
            if cache is None or annotation is None:
                continue
            key = self.keys[id(workload.resource)] = cache.key(
                workload, self.images, self.generator.required_images(workload)
            )
            policy_hash = cache.lookup(key, annotation)
            if policy_hash is not None:
                self.policies[id(workload.resource)] = (annotation, policy_hash)
                self.edits[id(workload.resource)].annotate(workload, annotation)

    def find_missing(self, files: Sequence[yamlio.ResourceFile]) -> None:
        """The workloads still without a policy, by file, and the files a worker must take."""
        for file in files:
            for workload in _placed_in(file, self.edits):
                if id(workload.resource) not in self.policies:
                    self.missing.setdefault(id(file), []).append(workload)
        self.items = [file for file in files if id(file) in self.missing or file.changed]
        if self.missing:
            self.generator.encoder  # noqa: B018 - made once here rather than in every worker

    def derive_and_write(self, file: yamlio.ResourceFile) -> _FileAnswer:
        """In a worker: the file's missing policies, its workloads' checks and its new text."""
        derived, made = [], []
        for workload in self.missing.get(id(file), []):
            if self.cache is not None:
                known = self.keys.get(id(workload.resource))
                if known is None:
                    known = self.cache.key(
                        workload, self.images, self.generator.required_images(workload)
                    )
                made.append(known)
            policy = self.generator.generate(workload, self.images, self.config_resources)
            self.edits[id(workload.resource)].annotate(workload, policy.annotation)
            derived.append((policy.annotation, policy.policy_hash))
        warnings = [
            checks.check(workload, self.edits[id(workload.resource)].platform, self.images)
            for workload in _placed_in(file, self.edits)
        ]
        # The plain documents do not change from here on (the round trips do): their
        # fingerprints, made once, tell what changed and what is written.
        fingerprints = file.fingerprints()
        changed = file.changed_documents(fingerprints)
        if not changed:
            return _FileAnswer(derived, made, warnings, "", "")
        _repeat_on_round_trips(file, self.edits, changed)
        content, text, _ = file.dumped_with_fingerprints(fingerprints)
        return _FileAnswer(derived, made, warnings, content, text)

    def take(self, index: int, answer: _FileAnswer) -> None:
        """Here: a worker's answer for `items[index]`, applied to this process's file."""
        file = self.items[index]
        lacking = self.missing.get(id(file), [])
        for workload, policy in zip(lacking, answer.derived, strict=True):
            self.policies[id(workload.resource)] = policy
            self.edits[id(workload.resource)].annotate(workload, policy[0])
        if self.cache is not None:
            self.keys.update(zip((id(w.resource) for w in lacking), answer.keys, strict=True))
        for workload, warnings in zip(_placed_in(file, self.edits), answer.warnings, strict=True):
            self.checked[id(workload.resource)] = warnings
        if answer.content:
            file.adopt(answer.content, answer.text)
            self.changed.append(file)
            if self.on_text is not None:
                self.on_text(file, answer.content, answer.text)

    def collect(self, placed: Sequence[tuple[Workload, Platform]]) -> _Derived:
        """The answers in the order of `placed`, stored in the cache; the rest checked here."""
        ordered = [self.policies[id(workload.resource)] for workload, _ in placed]
        if self.cache is not None:
            for (workload, _), (annotation, policy_hash) in zip(placed, ordered, strict=True):
                self.cache.store(self.keys[id(workload.resource)], annotation, policy_hash)
        warnings = []
        for workload, platform in placed:
            found = self.checked.get(id(workload.resource))
            warnings.append(
                checks.check(workload, platform, self.images) if found is None else found
            )
        return _Derived(ordered, warnings, self.changed)


def _check_schemas(
    resources: Sequence[tuple[Mapping[str, Any], str]],
    cache: SchemaCache | None,
    as_read: Mapping[int, str] | None = None,
) -> None:
    """`schema.check_all(resources)` on all cores (jsonschema is pure Python), errors in order.

    A resource that passed in the previous run, byte for byte under the same schemas, is not
    checked again (`cache`); the others are, and those that pass are recorded. `as_read`:
    `id(resource)` → its fingerprint, for resources unchanged since they were read.
    """
    known = as_read or {}
    keys = [
        None if cache is None else cache.key(resource, known.get(id(resource)))
        for resource, _ in resources
    ]
    unknown = [
        item
        for item, key in zip(resources, keys, strict=True)
        if cache is None or not cache.passed(key)
    ]
    if unknown:
        schema.prepare(resource for resource, _ in unknown)

        def check(item: tuple[Mapping[str, Any], str]) -> None:
            schema.check(*item)

        parallel.map_in_processes(check, unknown)
    if cache is not None:
        for key in keys:
            cache.record(key)


def _record_schemas(
    confidential: Sequence[Workload],
    cache: SchemaCache | None,
    as_written: Mapping[int, str] | None = None,
) -> None:
    """Check the confidential resources as generate changed them, only to record those that pass.

    The next run reads them as its input: recorded now, an unchanged re-run checks nothing. What
    generate added was not checked so far, and a changed form that does not pass is not recorded
    (the next run, which checks it as its input, reports it); this run is not refused for it.
    `as_written`: `id(resource)` → the fingerprint of the form written, where the write made it.
    """
    if cache is None:
        return
    known = as_written or {}
    unknown = []
    for workload in confidential:
        key = cache.key(workload.resource, known.get(id(workload.resource)))
        if cache.passed(key):
            cache.record(key)  # kept when the file is written again: the next run reads it
        elif key is not None:
            unknown.append((workload.resource, key))
    if not unknown:
        return
    schema.prepare(resource for resource, _ in unknown)

    def passes(item: tuple[Mapping[str, Any], str]) -> bool:
        try:
            schema.check(item[0], "")
        except Exception:  # whatever it is, the resource is just not recorded
            return False
        return True

    for (_, key), passed in zip(unknown, parallel.map_in_processes(passes, unknown), strict=True):
        if passed:
            cache.record(key)


def generate(
    options: Options,
    *,
    resolver: ImageResolver | None = None,
    references: ReferenceValueProvider | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> Result:
    """Rewrite the resources under `options.paths` and write the workspace files.

    Everything is read and checked first, and written last: a failure changes no file.
    """
    result = Result()
    caches = _Caches.open(options)
    inputs = _read_policy_inputs(options, caches.schemas)
    resources = _read_resources(options, caches, result)
    # The keys are read and checked, a missing one made in memory, before any image is read:
    # a refused key must not leave a layer cache or a new key behind (written with the rest).
    keys = prepare_owner_keys(
        options.workload_owner_keys,
        options.seedshare_owner_keys,
        create_missing=options.create_keys,
        disable_updates=options.disable_updates,
    )
    coordinator_namespace = inject.coordinator_namespace(resources.confidential)
    embedded = _reference_values(options.reference_values_file)
    handlers = {} if embedded is None else _handlers(embedded)
    edits = _place(options, resources.placed, handlers, coordinator_namespace)
    platforms = runtimeclass.used_platforms(resources.choices)
    provider = functools.cache(
        references
        or ReferenceValueProvider(
            emulated_tee=options.emulated_tee, embedded=embedded, handlers=handlers
        )
    )
    existing_values = (
        ReferenceValues() if inputs.previous is None else inputs.previous.reference_values
    )
    # A real platform's reference values are only read: taken now, a platform this build has
    # none for is refused before any image is read (or the layer cache written). The emulated
    # TEE's values are made with its state: they are taken below, once the images were read.
    manifest_document.reference_values(
        existing_values, [p for p in platforms if not p.emulated], provider
    )
    images = _read_images(options, inputs.generator, resources.confidential, resolver)
    config_resources = [yamlio.to_plain(document) for document, _ in resources.config_documents]
    caches.open_policies(options, inputs, config_resources)
    # Changed files are written beside themselves as their texts arrive (staging.py); a run
    # that fails before they are put in place removes them.
    with StagedWrites() as staged:
        derived = _policies_and_texts(
            resources.files,
            resources.placed,
            edits=edits,
            generator=inputs.generator,
            images=images,
            config_resources=config_resources,
            cache=caches.policies,
            on_text=staged.stage,
        )
        identities = _report_workloads(result, options, resources.placed, derived)
        result.platforms = tuple(p.display_name for p in platforms)
        values, result.missing_reference_values = manifest_document.reference_values(
            existing_values, platforms, provider
        )
        manifest = manifest_document.manifest(
            identities, values, keys, seedshare_threshold=options.seedshare_threshold
        )
        for text in (inputs.rules, inputs.new_settings):
            if text is not None and text.new:
                write_atomically(text.path, text.text.encode())
                result.written.append(text.path)
        result.written.extend(keys.write_new())
        _write_resources(options, resources, derived, staged, caches=caches, result=result)
        _write_manifest(options.manifest, manifest.to_bytes(), caches, result)
    return result


@dataclass
class _Caches:
    """The three files a run remembers for the next one, so that an unchanged re-run is quick.

    `schemas`: the inputs and resources that passed their checks (kuberesource/schemacache.py);
    `yaml`: the documents of the files read and written (kuberesource/yamlmemo.py); `policies`:
    the policies derived (policy/cache.py). Each is None where the options name no file. The
    policy cache is opened late, once the rules, settings and config resources it is keyed by
    are read; all three are saved together, after the resources were written.
    """

    schemas: SchemaCache | None
    yaml: YamlMemo | None
    policies: PolicyCache | None = None

    @classmethod
    def open(cls, options: Options) -> _Caches:
        return cls(
            schemas=None if options.schema_cache is None else SchemaCache(options.schema_cache),
            yaml=None if options.yaml_cache is None else YamlMemo(options.yaml_cache),
        )

    def open_policies(
        self,
        options: Options,
        inputs: _PolicyInputs,
        config_resources: Sequence[Mapping[str, Any]],
    ) -> None:
        # A debug run derives every policy: the cache's keys do not know the initdata flag.
        if options.policy_cache is None or options.insecure_debug_shell:
            return
        self.policies = PolicyCache(
            options.policy_cache, inputs.rules.text, inputs.settings, config_resources
        )

    def save(self) -> None:
        for remembered in (self.policies, self.schemas, self.yaml):
            if remembered is not None:
                remembered.save()


class _PolicyInputs(NamedTuple):
    """What every policy is derived from, and the manifest whose reference values are kept."""

    rules: _WorkspaceText
    new_settings: _WorkspaceText | None  # the default settings, to write on success
    settings: Settings
    previous: Manifest | None
    generator: PolicyGenerator


def _read_policy_inputs(options: Options, schemas: SchemaCache | None) -> _PolicyInputs:
    """The rules, settings and previous manifest, each checked before any resource is read."""
    rules = _rules(options.rules, schemas)
    new_settings, settings = _settings(options.settings)
    previous = _previous_manifest(options.manifest, schemas)
    debug = {debugshell.INITDATA_ENTRY: debugshell.INITDATA_VALUE}
    generator = PolicyGenerator(
        rules.text, settings, debug if options.insecure_debug_shell else None
    )
    return _PolicyInputs(rules, new_settings, settings, previous, generator)


class _Resources(NamedTuple):
    """The resources as read, and which of them are confidential on which platform."""

    files: list[yamlio.ResourceFile]
    config_documents: list[tuple[Mapping[str, Any], str]]  # ConfigMaps and Secrets, by file
    choices: list[runtimeclass.PlatformChoice]
    placed: list[tuple[Workload, Platform]]
    confidential: list[Workload]


def _read_resources(options: Options, caches: _Caches, result: Result) -> _Resources:
    """The resources, checked (schemas, annotations), their runtime classes resolved.

    Refused unless some of them are confidential and one of those is the Coordinator: without
    it, the manifest would be one nobody can set.
    """
    files = yamlio.load_paths(options.paths, plain=True, memo=caches.yaml)
    result.warnings.extend(_not_objects(files))
    config_documents = [
        (document, file.name)
        for file in files
        for document in file.documents
        if isinstance(document, Mapping) and _kind(document) in CONFIG_KINDS
    ]
    as_read = {key: value for file in files for key, value in file.fingerprints_as_read().items()}
    _check_schemas(
        [(w.resource, w.describe()) for file in files for w in file.workloads()] + config_documents,
        caches.schemas,
        as_read,
    )
    for file in files:
        knownannotations.check_documents(file.documents, file.name)
    choices = runtimeclass.resolve_all(
        [w for file in files for w in file.workloads()], options.platform
    )
    placed = [(c.workload, c.platform) for c in choices if c.platform is not None]
    if not placed:
        raise GenerateError(
            "none of the resources asks for a confidential runtime",
            hint="set runtimeClassName: contrast-cc (or a platform placeholder) on the pods",
        )
    confidential = [workload for workload, _ in placed]
    if not any(workload.role == "coordinator" for workload in confidential):
        raise GenerateError(
            "no Coordinator among the confidential resources",
            hint="add the output of `contrast coordinator-resources --platform P` to the resources",
        )
    return _Resources(files, config_documents, choices, placed, confidential)


def _place(
    options: Options,
    placed: Sequence[tuple[Workload, Platform]],
    handlers: Mapping[Platform, str],
    coordinator_namespace: str,
) -> dict[int, _Edit]:
    """Each confidential workload's edit, made on it: by `id(workload.resource)`."""
    edits: dict[int, _Edit] = {}
    for workload, platform in placed:
        edit = _Edit(platform, handlers.get(platform), coordinator_namespace, options)
        edit.place(workload)
        edits[id(workload.resource)] = edit
    return edits


def _read_images(
    options: Options,
    generator: PolicyGenerator,
    confidential: Sequence[Workload],
    resolver: ImageResolver | None,
) -> dict[str, ImageFacts]:
    """The facts of every image the policies name: the release's as recorded, others read."""
    wanted = sorted({image for w in confidential for image in generator.required_images(w)})
    resolver = resolver or ImageResolver(
        oci_layouts=list(options.oci_layouts),
        insecure_registries=list(options.insecure_registries),
        cache_path=options.layers_cache,
        progress=options.progress,
    )
    known = _release_facts(options.image_replacements)
    # A release image in a given OCI layout is read from there, the recorded facts otherwise.
    recorded = [i for i in wanted if i in known and not _in_layouts(i, options.oci_layouts)]
    images: dict[str, ImageFacts] = {image: known[image] for image in recorded}
    images.update(resolver.resolve([image for image in wanted if image not in images]))
    return images


def _report_workloads(
    result: Result,
    options: Options,
    placed: Sequence[tuple[Workload, Platform]],
    derived: _Derived,
) -> list[WorkloadIdentity]:
    """Each workload's manifest entry; its policy hash and warnings go into `result`."""
    identities = []
    for (workload, _), (_, policy_hash), warnings in zip(
        placed, derived.policies, derived.warnings, strict=True
    ):
        identities.append(_identity(workload, policy_hash))
        result.policies[workload.describe()] = policy_hash
        result.warnings.extend(warnings)
        unused = None if options.inject_image_store else imagestore.unused_size(workload)
        if unused is not None:
            result.warnings.append(unused)
        if options.insecure_debug_shell:
            result.warnings.append(
                checks.CheckWarning(
                    workload.describe(),
                    f"insecure debug shell access enabled (policy {policy_hash[:16]}…)",
                    "anyone who can exec into the pod gets a shell in its confidential VM;"
                    " never for production or sensitive data",
                )
            )
    return identities


def _write_resources(
    options: Options,
    resources: _Resources,
    derived: _Derived,
    staged: StagedWrites,
    *,
    caches: _Caches,
    result: Result,
) -> None:
    """Put the changed files in place (or all into `--output`), then record their schemas."""
    files = resources.files
    changed = {id(file) for file in derived.written}
    if options.output is not None:
        if yamlio.write_combined(files, options.output):
            result.written.append(options.output)
    else:
        # A file that did not change is not written (stdin always goes to stdout).
        to_write = [file for file in files if id(file) in changed or file.is_stdio]
        wrote = dict(zip(map(id, to_write), staged.write(to_write, caches.yaml), strict=True))
        for file in files:
            (result.written if wrote.get(id(file)) else result.unchanged).append(file.path)
    # Recorded once the files are written, with the fingerprints the write made of what it
    # wrote. An unchanged file's resources are what was read: their keys were recorded then.
    rewritten = {id(w.resource) for file in derived.written for w in file.workloads()}
    _record_schemas(
        [w for w in resources.confidential if id(w.resource) in rewritten],
        caches.schemas,
        staged.written_fingerprints(),
    )


def _write_manifest(path: Path, data: bytes, caches: _Caches, result: Result) -> None:
    """Write the manifest unless the file holds it already; the caches are saved just before.

    A new manifest is recorded as checked first (the next run reads it as its input), so the
    schema cache saved here already knows it.
    """
    unchanged = _holds(path, data)
    if not unchanged:
        _record_manifest(data, caches.schemas)
    caches.save()
    if unchanged:
        result.unchanged.append(path)
    else:
        write_atomically(path, data)
        result.written.append(path)
