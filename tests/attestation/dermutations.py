"""Certificates and CRLs edited inside their DER structure, for negative and property tests.

Flipping random bytes of a certificate mostly breaks its outer framing, which the loader refuses
at once. The interesting failures sit deeper: a field `cryptography` parses only when asked (an
extension listed twice, an unknown version, a name whose string does not decode). These helpers
edit one element of the tree and re-encode every length around it, so the result still frames
as a certificate and the edit reaches the lazily parsed fields.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from hypothesis import strategies as st

from contrast.attestation.tdx.der import encode, read_all, read_single

_CONSTRUCTED = 0x20
_UTF8_STRING = 0x0C
_NAME_PATHS_IN_TBS = {"certificate": 5, "crl": 2}  # subject of a v3 TBS, issuer of a v2 CRL


@dataclass(frozen=True)
class Node:
    tag: int
    content: bytes
    children: tuple[Node, ...] | None  # None: primitive, or content that is not DER

    @property
    def body(self) -> bytes:
        """The content octets as they are now (children re-encoded)."""
        if self.children is None:
            return self.content
        return b"".join(child.to_bytes() for child in self.children)

    def to_bytes(self) -> bytes:
        return encode(self.tag, self.body)

    def opaque(self, *, tag: int | None = None, body: bytes | None = None) -> Node:
        """This element as plain bytes, optionally with another tag or content."""
        return Node(self.tag if tag is None else tag, self.body if body is None else body, None)


def parse(data: bytes) -> Node:
    element = read_single(data)
    return _node(element.tag, element.content)


def _node(tag: int, content: bytes) -> Node:
    if not tag & _CONSTRUCTED:
        return Node(tag, content, None)
    try:
        children = tuple(_node(e.tag, e.content) for e in read_all(content))
    except Exception:  # content that is not DER stays opaque
        return Node(tag, content, None)
    return Node(tag, content, children)


Path = tuple[int, ...]


def at(node: Node, path: Path) -> Node:
    for index in path:
        assert node.children is not None
        node = node.children[index]
    return node


def edit(node: Node, path: Path, change: Callable[[Node], tuple[Node, ...]]) -> Node:
    """`node` with the element at `path` replaced by what `change` makes of it (0 or more)."""
    if not path:
        [changed] = change(node)
        return changed
    assert node.children is not None
    index, rest = path[0], path[1:]
    children = list(node.children)
    if rest:
        children[index] = edit(children[index], rest, change)
    else:
        children[index : index + 1] = change(children[index])
    return replace(node, children=tuple(children))


def paths(node: Node, prefix: Path = ()) -> list[Path]:
    """Every element's path, in pre-order."""
    found = [prefix]
    for index, child in enumerate(node.children or ()):
        found.extend(paths(child, (*prefix, index)))
    return found


# The malformations the issue names.


def _tbs_child(certificate: Node, tag: int) -> int:
    tbs = at(certificate, (0,))
    assert tbs.children is not None
    return next(i for i, child in enumerate(tbs.children) if child.tag == tag)


def with_duplicate_extension(der: bytes) -> bytes:
    """The certificate with its first extension listed twice (RFC 5280 forbids it)."""
    certificate = parse(der)
    extensions = (0, _tbs_child(certificate, 0xA3), 0, 0)
    return edit(certificate, extensions, lambda e: (e, e)).to_bytes()


def with_version(der: bytes, version: int) -> bytes:
    """The certificate claiming X.509 version `version` + 1 (2 is v3, the last there is)."""
    certificate = parse(der)
    number = (0, _tbs_child(certificate, 0xA0), 0)
    return edit(certificate, number, lambda n: (replace(n, content=bytes([version])),)).to_bytes()


def with_undecodable_name(der: bytes, kind: str = "certificate") -> bytes:
    """The subject (certificate) or issuer (CRL) with a UTF8String that is not UTF-8."""
    document = parse(der)
    value = (0, _NAME_PATHS_IN_TBS[kind], 0, 0, 1)
    return edit(document, value, lambda v: (Node(_UTF8_STRING, b"\xff\xfe", None),)).to_bytes()


# Random edits inside the structure.


@st.composite
def structural_mutations(draw: st.DrawFn, der: bytes) -> bytes:
    """`der` with one to three elements retagged, rewritten, cut, duplicated or dropped."""
    node = parse(der)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths(node)[1:]))
        operation = draw(st.sampled_from(["retag", "content", "cut", "duplicate", "drop"]))
        if operation == "retag":
            tag = draw(st.integers(0, 0x1E) | st.integers(0x80, 0xBE))  # single-byte tags
            node = edit(node, path, lambda n, tag=tag: (n.opaque(tag=tag | (n.tag & 0x20)),))
        elif operation == "content":
            body = draw(st.binary(max_size=12))
            node = edit(node, path, lambda n, body=body: (n.opaque(body=body),))
        elif operation == "cut":
            node = edit(node, path, lambda n: (n.opaque(body=n.body[: len(n.body) // 2]),))
        elif operation == "duplicate":
            node = edit(node, path, lambda n: (n, n))
        else:
            node = edit(node, path, lambda n: ())
    return node.to_bytes()
