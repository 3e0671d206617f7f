"""Finding the policies (initdata) of the workloads in a directory of Kubernetes YAML.

`contrast set` sends the policy documents with the manifest and checks that the two agree, so
that what the cluster will run is exactly what the manifest admits.

Reading is most of `set`'s time at scale (10 000 workload files: 14.5 s with ruamel's safe loader,
which is pure Python, about 1.5 ms a file). So each file is read the way `generate` reads it
(`kuberesource.yamlio.load_text` with `plain`): the documents `generate`'s memo (`yamlmemo`,
`yaml-cache.txt` in the workspace) remembers for exactly these bytes, else libyaml through
`yamlfast`, which declines anything whose value ruamel could read differently; ruamel's safe
loader reads what is declined and gives the error for text that is not YAML. The bounds are the
same on every way: the file's size before parsing, aliases and self-reference after it
(`yamlbounds`), nesting as a refusal. The memo is trusted as the manifest beside it in the
workspace is: whoever can write one can write the other.

Each annotation is then inflated (its document is what `set` sends) and, unless `generate`'s
policy cache (`policy-cache.json` in the workspace, `policy.cache.written_annotations`) knows the
annotation by its sha256, hashed as its initdata says (reading the document through to learn
the algorithm and that it is valid): at 10 000 generated workloads that was 1.1 s of `set`'s CPU,
hashing the 126 MB of annotations instead 0.1 s. An entry is the hash of the document `generate`
encoded into exactly that annotation, valid initdata by construction (`Initdata.to_toml`); an
annotation edited by hand after `generate` has another sha256 and is read in full. The cache is
trusted as the memo is; what the Coordinator stores is keyed by the documents' own sha256 there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ruamel.yaml.error import YAMLError

from contrast.boundedfile import read_bounded
from contrast.client.errors import ClientError
from contrast.kuberesource import yamlbounds
from contrast.kuberesource.yamlmemo import YamlMemo
from contrast.policy.initdata import ANNOTATION, decode_annotation, policy_hash

YAML_SUFFIXES = {".yml", ".yaml"}


class ResourceFileUnreadable(ClientError):
    """A YAML file of the resources whose policies `set` sends cannot be read (not found, too
    large, not UTF-8, not YAML); malformed resources are `kuberesource.workloads.ResourceError`."""


def yaml_files(directory: Path) -> list[Path]:
    return sorted(
        path for path in directory.rglob("*") if path.suffix in YAML_SUFFIXES and path.is_file()
    )


def _annotation_values(node: Any) -> Iterator[str]:
    """Every initdata annotation value anywhere in a document (pods, templates, lists)."""
    if isinstance(node, dict):
        metadata = node.get("metadata")
        if isinstance(metadata, dict):
            annotations = metadata.get("annotations")
            if isinstance(annotations, dict) and isinstance(annotations.get(ANNOTATION), str):
                yield annotations[ANNOTATION]
        for value in node.values():
            yield from _annotation_values(value)
    elif isinstance(node, list):
        for item in node:
            yield from _annotation_values(item)


def load_documents(text: str, name: str, memo: YamlMemo | None = None) -> Sequence[Any]:
    """The documents of one file's text as plain data, within `yamlbounds`' bounds.

    `memo`: generate's, whose entries are keyed by every byte of the text and the reading code.
    Syntax errors are left to the caller (`YAMLError`), as `yamlbounds.load_all_safe` leaves them.
    """
    if memo is not None:
        found = memo.lookup(text)  # never a text with an anchor, so no alias to bound
        if found is not None:
            return found[1]
    from contrast.kuberesource import yamlfast  # noqa: PLC0415 - PyYAML only when parsing

    documents = yamlfast.load_all(text)
    if documents is None:  # declined or not YAML: ruamel's reading and its error
        return yamlbounds.load_all_safe(text, name)
    yamlbounds.check_aliases(documents, text, name)
    return documents


def collect_policies(
    directory: Path, memo: YamlMemo | None = None, written: Mapping[str, str] | None = None
) -> dict[str, bytes]:
    """Policy hash (hex) → initdata TOML for every annotated workload under `directory`.

    `memo`: generate's YAML memo of the workspace, if there is one (see `load_documents`).
    `written`: the policy hash of each annotation generate wrote, by the annotation's sha256
    (`policy.cache.written_annotations`; see the module docstring).
    """
    policies: dict[str, bytes] = {}
    for path in yaml_files(directory):
        try:
            data = read_bounded(
                path,
                yamlbounds.MAX_FILE_BYTES,
                what="the resource file",
                hint="pass the directory of the resources contrast generate wrote",
            )
            documents = load_documents(data.decode(), str(path), memo)
        except (OSError, YAMLError, UnicodeDecodeError) as error:
            raise ResourceFileUnreadable(f"cannot read {path}: {error}") from None
        for document in documents:
            for value in _annotation_values(document):
                toml = decode_annotation(value)
                known = _written_hash(value, written) if written else None
                policies[known or policy_hash(toml).hex()] = toml
    return policies


def _written_hash(annotation: str, written: Mapping[str, str]) -> str | None:
    return written.get(hashlib.sha256(annotation.encode("utf-8", "surrogatepass")).hexdigest())
