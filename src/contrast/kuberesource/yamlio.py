"""Reading and writing Kubernetes YAML so that `generate` changes only what it means to change.

Users run `generate` on their own files, on `kustomize build` output and on `helm template`
output, and keep those files in version control. So a file is parsed with ruamel's round-trip
loader (comments, key order and quoting survive), and each document remembers its exact source
text: a document nobody changed is written back byte for byte, and only a changed document is
re-serialised, in the indentation style it was written in. A file whose documents are all
unchanged is not written at all.

A document counts as changed when its content (values and key order, as JSON) differs from the
content it had right after loading: cheap to compare, and no mutation needs tracking. Only the
changed documents are serialised, because ruamel's round-trip code is slow.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import io
import itertools
import re
import stat
import sys
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, MutableSequence, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import DocumentEndEvent
from ruamel.yaml.scalarbool import ScalarBoolean
from ruamel.yaml.scalarstring import (
    DoubleQuotedScalarString,
    ScalarString,
    SingleQuotedScalarString,
)

from contrast.boundedfile import read_bounded, read_stream_bounded, read_text_stream_bounded
from contrast.files import StagedFile, stage, sync_directory
from contrast.jsontext import dumps_compact
from contrast.kuberesource import yamlblob, yamlbounds
from contrast.kuberesource.workloads import ResourceError, Workload, workloads
from contrast.kuberesource.yamlmemo import YamlMemo

# yamlfast, yamlrtload and yamlrtdump (built on libyaml through PyYAML) are imported where they
# are used: a re-run whose files the memo knows (`yamlmemo`) parses nothing, and loading PyYAML
# was a tenth of its start.

STDIO = "-"
SUFFIXES = (".yml", ".yaml")
# Long strings (initdata annotations) must never be folded across lines.
LINE_WIDTH = 1 << 20
_DOCUMENT_START = re.compile(r"^---(?:[ \t]|$)", re.MULTILINE)
_DOCUMENT_END = re.compile(r"^\.\.\.(?:[ \t]|$)", re.MULTILINE)
# What plain ASCII text is made of: printable characters and the newline.
_PLAIN_ASCII = bytes(range(0x20, 0x7F)) + b"\n"


class YamlError(ResourceError):
    """A file that is not valid YAML, or cannot be read or written."""


@dataclass(frozen=True)
class Indentation:
    """Block indentation of a document, as ruamel's `YAML.indent()` takes it."""

    mapping: int = 2
    sequence: int = 2
    offset: int = 0


@dataclass(frozen=True)
class _Source:
    """What a document looked like when it was read.

    How it was written (`---`, `...`, its indentation) matters only when the document is written
    again: never for an unchanged file, and in a worker process for generate. So it is read from
    the text on first use (for a thousand files, 0.1 s less before generate's workers start).
    """

    text: str  # the document's exact text, separator and comments included
    fingerprint: str  # the document's content right after loading

    @functools.cached_property
    def explicit_start(self) -> bool:
        """Whether it begins with `---`."""
        return _starts_explicitly(self.text)

    @functools.cached_property
    def explicit_end(self) -> bool:
        """Whether it ends with `...`."""
        return _begins_a_line(self.text, "...") and bool(_DOCUMENT_END.search(self.text))

    @functools.cached_property
    def indentation(self) -> Indentation:
        return guess_indentation(self.text)


@dataclass(frozen=True)
class ResourceFile:
    """One YAML stream: its path (`-` for stdin) and its documents, as ruamel round-trip nodes.

    The documents are mutable on purpose: `Workload`s edit them in place, and `dump()` writes
    the result.
    """

    path: Path
    documents: tuple[Any, ...]
    text: str
    _sources: tuple[_Source, ...] = field(repr=False, compare=False)
    # Read by `yamlfast` (plain dicts): a document is parsed with ruamel only when it changes.
    plain: bool = False
    _round_trips: dict[int, Any] = field(default_factory=dict, repr=False, compare=False)
    # Round trips built by `yamlrtload`: their fingerprint is their JSON (see `fingerprint`).
    _native: set[int] = field(default_factory=set, repr=False, compare=False)
    # The text a worker process wrote for this file (`dumped()` there, `adopt()` here), keyed by
    # the content it was written for.
    _adopted: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_stdio(self) -> bool:
        return str(self.path) == STDIO

    @property
    def name(self) -> str:
        return "<stdin>" if self.is_stdio else str(self.path)

    def workloads(self) -> list[Workload]:
        """The workloads of all documents (inside `List`s too), named after this file."""
        return list(workloads(self.documents, self.name))

    def changed_documents(self, fingerprints: Sequence[str] | None = None) -> list[int]:
        """Indices of the documents whose content differs from what was read.

        `fingerprints`: this file's `fingerprints()`, if the caller made them after it last
        changed a document (each is a JSON text of the document, 0.15 ms for a generated one).
        """
        return self._changed(self.fingerprints() if fingerprints is None else fingerprints)

    def fingerprints(self) -> list[str]:
        """Each document's `fingerprint`."""
        return [fingerprint(document) for document in self.documents]

    def fingerprints_as_read(self) -> dict[int, str]:
        """`id(document)` → its `fingerprint` when it was read (which it still is until it is
        changed), made then (for a remembered file: without a parser)."""
        return {
            id(document): source.fingerprint
            for document, source in zip(self.documents, self._sources, strict=True)
        }

    def _changed(self, fingerprints: Sequence[str]) -> list[int]:
        return [
            index
            for index, (content, source) in enumerate(zip(fingerprints, self._sources, strict=True))
            if content != source.fingerprint
        ]

    @property
    def changed(self) -> bool:
        return bool(self.changed_documents())

    def round_trip(self, index: int) -> Any:
        """Document `index` as ruamel's round-trip node, the one `dump()` writes if it changed.

        For a file read by ruamel that is the document itself. For a `plain` one it is parsed
        from the document's source text on first use, and the caller makes on it the same
        changes it made on the plain document: `dump()` checks that both then agree.
        """
        if not self.plain:
            return self.documents[index]
        if index not in self._round_trips:
            from contrast.kuberesource import yamlrtload  # noqa: PLC0415 - see the imports

            source = self._sources[index].text
            fast = yamlrtload.load(source)
            if fast is not None:
                self._native.add(index)
                documents: tuple[Any, ...] = (fast,)
            else:
                documents = _load_with_blobs_set_aside(source) or tuple(_yaml().load_all(source))
            if len(documents) != 1:  # pragma: no cover - split where the parser splits
                raise YamlError(f"{self.name}: cannot tell its documents apart")
            self._round_trips[index] = documents[0]
        return self._round_trips[index]

    def _to_write(self, index: int, wanted: str) -> Any:
        """The node to write for document `index`, whose fingerprint is `wanted`."""
        document = self.documents[index]
        if not self.plain:
            return document
        round_trip = self._round_trips.get(index)
        if round_trip is None:
            round_trip = self.round_trip(index)
        native = index in self._native
        if fingerprint(round_trip, native=native) != wanted:
            # A change the caller did not repeat (a reader that filled in a missing mapping):
            # carried over here, keeping every node whose content it does not touch.
            round_trip = self._round_trips[index] = _carry_over(round_trip, document)
            if fingerprint(round_trip) != wanted:  # pragma: no cover - a bug
                raise RuntimeError(f"{self.name}: document {index} cannot be written as changed")
        return round_trip

    def dump(self) -> str:
        """The stream as text: unchanged documents verbatim, changed ones re-serialised."""
        return self.dumped()[1]

    def dumped(self) -> tuple[str, str]:
        """`dump()`, and a digest of the content it is the text of (for `adopt`)."""
        content, text, _ = self.dumped_with_fingerprints()
        return content, text

    def dumped_with_fingerprints(
        self, fingerprints: Sequence[str] | None = None
    ) -> tuple[str, str, list[str]]:
        """`dumped()` and the fingerprints of the documents written (for `remember_written`).

        `fingerprints` as for `changed_documents`.
        """
        fingerprints = self.fingerprints() if fingerprints is None else list(fingerprints)
        changed = set(self._changed(fingerprints))
        if not changed:
            return "", self.text, fingerprints
        joined = "\0".join(fingerprints).encode("utf-8", "surrogatepass")
        content = hashlib.sha256(joined).hexdigest()
        adopted = self._adopted.get(content)
        if adopted is None:
            adopted = self._serialise(changed, fingerprints)
        return content, adopted, fingerprints

    def adopt(self, content: str, text: str) -> None:
        """Take `text` as `dump()`'s, made by a worker process that had the same content.

        The worker made the round-trip edits and serialised; this process has only the plain
        documents. The text is used only while the content is `content` (see `dumped()`).
        """
        if content:
            self._adopted.clear()
            self._adopted[content] = text

    def _serialise(self, changed: set[int], fingerprints: Sequence[str]) -> str:
        parts = []
        for index, source in enumerate(self._sources):
            if index in changed:
                parts.append(_serialise(self._to_write(index, fingerprints[index]), source))
            else:
                parts.append(source.text)
        return "".join(_join(parts))

    def write(self, stdout: TextIO | None = None, memo: YamlMemo | None = None) -> bool:
        """Write back in place (atomically, keeping the file mode) if anything changed.

        For `-` the stream always goes to stdout, changed or not, as a filter would.
        Returns whether anything was written to a file or differed. A file written is
        remembered in `memo` with its documents (`yamlmemo`: why they are its documents): only
        one read plain (one that only ruamel could read is read by it again), and only text of
        printable ASCII lines (ruamel writes some other characters so that they read back as
        something else: a NEL in a quoted string folds into a space).
        """
        content, text, fingerprints = self.dumped_with_fingerprints()  # "": nothing changed
        if self.is_stdio:
            (stdout or sys.stdout).write(text)
            return bool(content)
        if not content:
            return False
        _write_file(self.path, text)
        if memo is not None:
            self.remember_written(memo, text, fingerprints)
        return True

    def remember_written(self, memo: YamlMemo, text: str, fingerprints: Sequence[str]) -> None:
        """Remember `text`, just written, as the documents of `fingerprints` (see `write`)."""
        if self.plain and _is_plain_ascii(text):
            memo.remember(text, fingerprints)


def _carry_over(target: Any, source: Any) -> Any:
    """`target` (a round-trip node) changed to hold `source`'s content, in `source`'s order.

    Mappings and same-length sequences are changed in place, so the comments and styles of
    what they keep stay; anything else that differs is replaced by `source`'s value.
    """
    if isinstance(target, MutableMapping) and isinstance(source, Mapping):
        for key in [key for key in target if key not in source]:
            del target[key]
        for key, value in source.items():
            target[key] = _carry_over(target[key], value) if key in target else value
        if list(target) != list(source):
            move_to_end = getattr(target, "move_to_end", None)  # keeps a key's comments
            for key in source:
                if move_to_end is not None:
                    move_to_end(key)
                else:
                    target[key] = target.pop(key)
        return target
    if isinstance(target, MutableSequence) and isinstance(source, list):
        if len(target) != len(source):
            return source
        for position, value in enumerate(source):
            target[position] = _carry_over(target[position], value)
        return target
    return target if fingerprint(target) == fingerprint(source) else source


def _write_file(path: Path, text: str) -> None:
    put_in_place(stage_file(path, text))


def put_in_place(staged: StagedFile, *, sync: bool = True) -> None:
    """A staged text renamed over its file (and, with `sync`, the rename made durable)."""
    try:
        staged.commit()
        if sync:
            sync_directory(staged.path.parent)
    except OSError as error:
        raise YamlError(f"cannot write {staged.path}: {error.strerror}") from error


def stage_file(path: Path, text: str, *, sync: bool = True) -> StagedFile:
    """`text` written and (with `sync`) synced beside `path` with `path`'s mode, to be put in
    place (without `sync`, once the caller has synced it: `contrast.syncfs`)."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o644
        return stage(path, text.encode(), mode=mode, sync=sync)
    except OSError as error:
        raise YamlError(f"cannot write {path}: {error.strerror}") from error


def combined(files: Iterable[ResourceFile]) -> str:
    """All files as one stream (`generate --output`), a `---` between files where needed."""
    parts: list[str] = []
    for file in files:
        text = file.dump()
        if not text.strip():
            continue
        if parts and not _starts_explicitly(text):
            parts.append("---\n")
        parts.append(text)
    return "".join(_join(parts))


def write_combined(
    files: Iterable[ResourceFile], output: str | Path, stdout: TextIO | None = None
) -> bool:
    """Write `combined(files)` to `output` (`-` for stdout) if it differs; whether it did."""
    text = combined(files)
    if str(output) == STDIO:
        (stdout or sys.stdout).write(text)
        return True
    path = Path(output)
    if path.is_file() and path.read_text(encoding="utf-8", errors="replace") == text:
        return False
    _write_file(path, text)
    return True


def _join(parts: Sequence[str]) -> Iterator[str]:
    """Make sure every part ends with a newline, so the next `---` starts a line."""
    for part in parts:
        yield part if not part or part.endswith("\n") else f"{part}\n"


def _yaml(indentation: Indentation = Indentation()) -> YAML:
    yaml = YAML(typ="rt", pure=True)
    yaml.preserve_quotes = True
    yaml.width = LINE_WIDTH
    yaml.indent(
        mapping=indentation.mapping, sequence=indentation.sequence, offset=indentation.offset
    )
    return yaml


def _serialise(document: Any, source: _Source) -> str:
    """The document as text, with long blobs set aside while ruamel's emitter works.

    The emitter looks at every character of a scalar to choose its style; for a 16 KB initdata
    annotation that was most of the time `generate` spent writing. A blob (see `yamlblob`) is plain
    text in every style, so it is swapped for a short token of the same kind, and the token for
    the blob in the text ruamel writes.
    """
    from contrast.kuberesource import yamlrtdump  # noqa: PLC0415 - see the imports

    indentation = source.indentation
    written = yamlrtdump.dump(
        document,
        mapping=indentation.mapping,
        sequence=indentation.sequence,
        offset=indentation.offset,
        explicit_start=source.explicit_start,
    )
    if written is not None and not source.explicit_end:
        return written
    blobs: dict[str, str] = {}
    prefix = ""
    swapped: list[tuple[Any, Any, Any]] = []  # (container, key or index, original value)

    def aside(node: Any) -> None:
        nonlocal prefix
        items = node.items() if isinstance(node, MutableMapping) else enumerate(node)
        for key, value in list(items):
            if isinstance(value, MutableMapping | MutableSequence):
                aside(value)
            elif _is_blob(value) and not _has_comment(node, key):
                if not prefix:
                    prefix = f"contrastblob{hashlib.sha256(value.encode()).hexdigest()[:16]}n"
                token = f"{prefix}{len(blobs)}z"
                blobs[token] = str(value)
                swapped.append((node, key, value))
                node[key] = type(value)(token)

    if isinstance(document, MutableMapping | MutableSequence):
        aside(document)
    try:
        text = _dump(document, source)
    finally:
        for node, key, value in swapped:
            node[key] = value
    if not blobs:
        return text
    if text.count(prefix) != len(blobs):  # pragma: no cover - a token the text already had
        return _dump(document, source)
    return re.sub(rf"{prefix}\d+z", lambda match: blobs[match.group(0)], text)


def _has_comment(node: Any, key: Any) -> bool:
    """Whether a comment follows the item: its column depends on the value's length."""
    comments = getattr(node, "ca", None)
    return comments is not None and key in comments.items


def _is_blob(value: Any) -> bool:
    if type(value) not in _RESTORABLE:
        return False
    anchored = isinstance(value, ScalarString) and value.anchor.value is not None
    return not anchored and yamlblob.is_blob(value)


def _dump(document: Any, source: _Source) -> str:
    yaml = _yaml(source.indentation)
    yaml.explicit_start = source.explicit_start
    yaml.explicit_end = source.explicit_end
    stream = io.StringIO()
    yaml.dump(document, stream)
    return stream.getvalue()


def guess_indentation(text: str) -> Indentation:
    """The indentation of the first nested mapping and the first block sequence in `text`.

    ruamel's own guess takes the sequence indentation for the mapping one (`helm template`
    output indents mappings by 2 and sequences by 4), so look at both separately.
    """
    mapping: int | None = None
    offset: int | None = None
    previous: tuple[int, str] | None = None
    for line in text.splitlines():
        content = line.lstrip(" ")
        if not content or content.startswith("#") or _DOCUMENT_START.match(line):
            continue
        indent = len(line) - len(content)
        if previous is not None and previous[1].rstrip().endswith(":"):
            # The key of `- key:` starts after the dash.
            key_column = previous[0] + (2 if previous[1].startswith("- ") else 0)
            step = indent - key_column
            if content.startswith("- ") or content == "-":
                if offset is None and step >= 0:
                    offset = step
            elif mapping is None and step > 0:
                mapping = step
        if mapping is not None and offset is not None:
            break
        previous = (indent, content)
    mapping = mapping or 2
    offset = offset or 0
    return Indentation(mapping=mapping, sequence=offset + 2, offset=offset)


def _error(name: str, error: YAMLError) -> YamlError:
    if isinstance(error, MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        problem = error.problem or "invalid YAML"
        return YamlError(
            f"{name}: line {mark.line + 1}, column {mark.column + 1}: {problem}",
            hint="fix the YAML syntax there",
        )
    # ruamel's messages span lines ("  in <unicode string>, position 3"): one line for the CLI.
    return YamlError(f"{name}: {' '.join(str(error).split())}", hint="fix the YAML syntax")


def _is_plain_ascii(text: str) -> bool:
    """Whether `text` has only printable ASCII characters and newlines.

    `bytes.translate` deleting those leaves nothing: ten times faster than a regular
    expression's search, which took 0.15 ms for a generated file.
    """
    return text.isascii() and not text.encode("ascii").translate(None, _PLAIN_ASCII)


def fingerprint(document: Any, *, native: bool = False) -> str:
    """The document's content as compact JSON (values and key order), to compare it with.

    A plain document (`yamlfast`: dicts with string keys, lists, str, int, float, bool, None,
    and what generate puts in, of the same types) is that JSON already, and `dumps_compact`
    (orjson, or json's C encoder) writes it ten times faster than copying it with `to_plain`
    first; the text is the same.
    So is a `native` one: a round trip from `yamlrtload`, whose nodes are subclasses of those
    types that JSON writes as their base (no `ScalarBoolean`, which is an int, no bool keys).
    """
    if native or type(document) is dict:
        try:
            return dumps_compact(document)
        except (TypeError, ValueError):  # a value JSON has no form for: the general way
            pass
    return dumps_compact(to_plain(document))


def _has_content(text: str) -> bool:
    return any(line.strip() and not line.lstrip().startswith("#") for line in text.splitlines())


def _begins_a_line(text: str, marker: str) -> bool:
    """Whether a line of `text` begins with `marker` (where a MULTILINE `^` may match).

    A test with `in` before the marker regexes: a regex starting with `^` is tried at every
    position, which over a file's 16 KB initdata line cost more than libyaml's parse of it.
    """
    return text.startswith(marker) or f"\n{marker}" in text


def _split_at_markers(text: str, count: int) -> list[str] | None:
    """The documents' texts, split at `---` lines; None if that does not give `count` of them.

    A `---` at the start of a line always starts a document (the spec forbids it inside
    scalars), so this is exact for the streams `kubectl`, kustomize and helm write; directives,
    `...` markers and anything unexpected take the parser's way.
    """
    if _begins_a_line(text, "...") or _begins_a_line(text, "%"):
        return None
    starts = (
        [match.start() for match in _DOCUMENT_START.finditer(text)]
        if _begins_a_line(text, "---")
        else []
    )
    boundaries = [0, *(start for start in starts if start > 0), len(text)]
    texts = [text[start:end] for start, end in itertools.pairwise(boundaries)]
    if texts and not texts[0].startswith("---") and not _has_content(texts[0]):
        if len(texts) == 1:
            return [] if count == 0 else None
        texts[1] = texts[0] + texts[1]  # leading comments belong to the first document
        del texts[0]
    return texts if len(texts) == count else None


def _document_texts(text: str, name: str) -> list[str]:
    """Split the stream into the exact text of each document, as the parser sees them."""
    boundaries = [0]
    try:
        for event in _yaml().parse(text):
            if isinstance(event, DocumentEndEvent):
                boundaries.append(event.end_mark.index)
    except YAMLError as error:
        raise _error(name, error) from error
    boundaries[-1] = len(text)  # trailing comments after the last document belong to it
    return [text[start:end] for start, end in itertools.pairwise(boundaries)]


def load_text(
    text: str, path: str | Path = STDIO, *, plain: bool = False, memo: YamlMemo | None = None
) -> ResourceFile:
    """Parse a YAML stream; `path` names it in messages and tells `write()` where it goes.

    `plain`: read with `yamlfast` where it can (see `ResourceFile.round_trip`), or take the
    documents `memo` remembers for this text (`yamlmemo`), and remember what was read.
    """
    name = "<stdin>" if str(path) == STDIO else str(path)
    found = None if memo is None or not plain else memo.lookup(text)
    remembered, documents = (None, None) if found is None else found
    if documents is None and plain:
        from contrast.kuberesource import yamlfast  # noqa: PLC0415 - see the imports

        documents = yamlfast.load_all(text)
    texts = None if documents is None else _split_at_markers(text, len(documents))
    if texts is None:
        remembered = None
        documents = None  # a stream whose documents only ruamel's parser tells apart
    read_plain = documents is not None
    if documents is None:
        documents = _load_with_blobs_set_aside(text)
    if documents is None:
        try:
            documents = tuple(_yaml().load_all(text))
        except YAMLError as error:
            raise _error(name, error) from error
        except RecursionError:
            raise yamlbounds.too_deep(name) from None
        except (TypeError, ValueError) as error:  # ruamel on a complex key holding a list
            raise YamlError(
                f"{name}: ruamel cannot read it: {error}",
                hint="simplify the YAML there (a plain string key instead of a complex one)",
            ) from None
    yamlbounds.check_aliases(documents, text, name)
    if texts is None:
        texts = _split_at_markers(text, len(documents))
    if texts is None:
        texts = _document_texts(text, name)
    if len(texts) != len(documents):  # pragma: no cover - the parser and loader disagree
        raise YamlError(f"{name}: cannot tell its documents apart")
    fingerprints = remembered or [fingerprint(document) for document in documents]
    sources = [
        _Source(document_text, content)
        for document_text, content in zip(texts, fingerprints, strict=True)
    ]
    if memo is not None and read_plain and remembered is None:
        memo.remember(text, fingerprints)
    return ResourceFile(Path(path), documents, text, tuple(sources), plain=read_plain)


# The kinds of string a blob may be restored into: those whose only state is their text.
_RESTORABLE = (str, DoubleQuotedScalarString, SingleQuotedScalarString)


def _load_with_blobs_set_aside(text: str) -> tuple[Any, ...] | None:
    """The documents of `text`, parsed with each long blob replaced by a short token.

    Each token is put back into the string value it landed in, so the result equals what ruamel
    reads from `text` itself. None (parse `text` itself) when there is no blob, when a token
    landed anywhere but in a plain or quoted string value (a key, a comment, a folded or
    anchored scalar), or when the shortened text does not parse: the full parse then gives the
    exact error.
    """
    blobs = yamlblob.PATTERN.findall(text)
    if not blobs:
        return None
    nonce = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    prefix = f"contrastblob{nonce}n"
    if prefix in text:
        return None
    numbers = iter(itertools.count())
    shortened = yamlblob.PATTERN.sub(lambda _: f"{prefix}{next(numbers)}z", text)
    try:
        documents = tuple(_yaml().load_all(shortened))
    except Exception:  # whatever it is, the full parse gives ruamel's own answer
        return None
    token = re.compile(rf"{prefix}(\d+)z")
    restored = 0

    def restore(value: Any) -> Any:
        nonlocal restored
        if isinstance(value, str) and prefix in value:
            anchored = isinstance(value, ScalarString) and value.anchor.value is not None
            if type(value) not in _RESTORABLE or anchored:
                raise _NotRestorable
            text, count = token.subn(lambda match: blobs[int(match.group(1))], value)
            restored += count
            return type(value)(text)
        if isinstance(value, MutableMapping):
            for key, item in list(value.items()):
                if isinstance(key, str) and prefix in key:
                    raise _NotRestorable
                new = restore(item)
                if new is not item:
                    if getattr(value, "merge", None):  # the key may be a merged one: keep out
                        raise _NotRestorable
                    value[key] = new
        elif isinstance(value, MutableSequence):
            for index, item in enumerate(value):
                new = restore(item)
                if new is not item:
                    value[index] = new
        return value

    try:
        documents = tuple(restore(document) for document in documents)
    except _NotRestorable:
        return None
    return documents if restored == len(blobs) else None


class _NotRestorable(Exception):
    """A token landed where putting the blob back would not give ruamel's own reading."""


def _starts_explicitly(document_text: str) -> bool:
    """Whether the first line that is not a comment or blank is a `---` marker."""
    for line in document_text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped.startswith("%"):
            continue
        return bool(_DOCUMENT_START.match(line))
    return False


def load(
    path: str | Path,
    stdin: TextIO | None = None,
    *,
    plain: bool = False,
    memo: YamlMemo | None = None,
) -> ResourceFile:
    """Read one file, or stdin for `-` (`memo`: see `load_text`; files only)."""
    name = str(path)
    if name == STDIO:
        return load_text(_read_stdin(stdin or sys.stdin), STDIO, plain=plain)
    try:
        data = read_bounded(
            Path(path), yamlbounds.MAX_FILE_BYTES, what="the YAML file", hint=_CHECK_PATH
        )
    except OSError as error:
        raise YamlError(f"cannot read {name}: {error.strerror}", hint=_CHECK_PATH) from error
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise YamlError(f"{name} is not UTF-8 text (byte {error.start})") from error
    return load_text(text, name, plain=plain, memo=memo)


_CHECK_PATH = "check the path you passed"
_SPLIT = "pass the resources as files instead"


def _read_stdin(stream: TextIO) -> str:
    """Standard input as text, within `yamlbounds.MAX_FILE_BYTES` (`contrast.boundedfile`)."""
    limit = yamlbounds.MAX_FILE_BYTES
    buffer = getattr(stream, "buffer", None)
    if buffer is None:  # a text stream of its own (tests pass a StringIO)
        return read_text_stream_bounded(
            stream, limit, name="on stdin", what="the YAML", hint=_SPLIT
        )
    data = read_stream_bounded(buffer, limit, name="on stdin", what="the YAML", hint=_SPLIT)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise YamlError(f"stdin is not UTF-8 text (byte {error.start})") from error


def yaml_files(directory: Path) -> list[Path]:
    """`*.yml` / `*.yaml` below `directory`, sorted, skipping hidden directories (`.git`)."""
    found = []
    for candidate in sorted(directory.rglob("*")):
        relative = candidate.relative_to(directory)
        if any(part.startswith(".") for part in relative.parts[:-1]):
            continue
        if candidate.suffix in SUFFIXES and candidate.is_file():
            found.append(candidate)
    return found


def load_paths(
    paths: Iterable[str | Path],
    stdin: TextIO | None = None,
    *,
    plain: bool = False,
    memo: YamlMemo | None = None,
) -> list[ResourceFile]:
    """Files as given, directories walked for YAML files, `-` for stdin; in the given order."""
    files = []
    for path in paths:
        if str(path) == STDIO:
            files.append(load(STDIO, stdin, plain=plain))
        elif Path(path).is_dir():
            files.extend(load(found, plain=plain, memo=memo) for found in yaml_files(Path(path)))
        else:
            files.append(load(path, plain=plain, memo=memo))
    return files


def to_plain(node: Any) -> Any:
    """A JSON-compatible copy of a ruamel node: dicts, lists, str, int, float, bool, None.

    For consumers that hash or serialise resources (the policy generator): ruamel's scalar
    subclasses, comments and anchors must not leak into what they see.
    """
    kind = type(node)
    # Plain values first, by their exact type (most of a resource, and cheaper than the ABC
    # checks below): each is returned as the branches below would return it.
    if kind is str or kind is int or kind is float or kind is bool or node is None:
        return node
    if kind is dict:
        return {str(key): to_plain(value) for key, value in node.items()}
    if kind is list:
        return [to_plain(item) for item in node]
    if isinstance(node, Mapping):
        return {str(key): to_plain(value) for key, value in node.items()}
    if isinstance(node, list | tuple):
        return [to_plain(item) for item in node]
    if node is None:
        return None
    if isinstance(node, bool | ScalarBoolean):
        return bool(node)
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    if isinstance(node, datetime.date | datetime.datetime):
        return node.isoformat()
    if hasattr(node, "value"):  # TaggedScalar and the like
        return to_plain(node.value)
    return str(node)


def dump_documents(documents: Sequence[Mapping[str, Any]]) -> str:
    """New resources (the release's, not a user's file) as a multi-document YAML stream."""
    yaml = YAML()
    yaml.default_flow_style = False
    yaml.width = LINE_WIDTH
    # Shared sub-dicts (labels) would otherwise come out as YAML anchors and aliases.
    yaml.representer.ignore_aliases = lambda *_: True
    buffer = io.StringIO()
    yaml.dump_all(documents, buffer)
    return buffer.getvalue()
