"""Image reference parsing: Docker's normalisation table and properties of the parser."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contrast.images.reference import ImageReference, ImageReferenceError

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag", "digest"),
    [
        ("nginx", "docker.io", "library/nginx", "latest", None),
        ("nginx:1.25", "docker.io", "library/nginx", "1.25", None),
        ("user/app", "docker.io", "user/app", "latest", None),
        ("docker.io/nginx", "docker.io", "library/nginx", "latest", None),
        ("index.docker.io/library/nginx", "docker.io", "library/nginx", "latest", None),
        ("localhost/app", "localhost", "app", "latest", None),
        ("localhost:5000/a/b:t", "localhost:5000", "a/b", "t", None),
        ("127.0.0.1:5000/x", "127.0.0.1:5000", "x", "latest", None),
        ("Registry/x", "Registry", "x", "latest", None),  # upper case: a host, as in Docker
        ("ghcr.io/o/r/deep/path:v1.2-rc_3", "ghcr.io", "o/r/deep/path", "v1.2-rc_3", None),
        (f"ghcr.io/o/r@{DIGEST}", "ghcr.io", "o/r", None, DIGEST),
        (f"quay.io/o/r:t@{DIGEST}", "quay.io", "o/r", "t", DIGEST),
        (f"nginx@{DIGEST}", "docker.io", "library/nginx", None, DIGEST),
        ("[::1]:5000/app:v", "[::1]:5000", "app", "v", None),
        ("a.b/c__d.e-f---g", "a.b", "c__d.e-f---g", "latest", None),
    ],
)
def test_normalisation(
    text: str, registry: str, repository: str, tag: str | None, digest: str | None
) -> None:
    reference = ImageReference.from_string(text)
    assert reference == ImageReference(registry, repository, tag, digest)
    assert ImageReference.from_string(str(reference)) == reference
    assert reference.pinned == (digest is not None)
    assert reference.manifest_reference == (digest or tag)


def test_docker_hub_api_host() -> None:
    assert ImageReference.from_string("nginx").api_host == "registry-1.docker.io"
    assert ImageReference.from_string("ghcr.io/a/b").api_host == "ghcr.io"


@pytest.mark.parametrize(
    ("text", "part"),
    [
        ("", "empty"),
        (" nginx", "whitespace"),
        ("Nginx", "repository"),
        ("nginx:", "tag"),
        ("nginx:-x", "tag"),
        ("a//b", "repository"),
        ("a/b/", "repository"),
        ("host:5000/", "no repository"),
        ("nginx@sha256:abc", "digest"),
        ("nginx@md5:" + "a" * 32, "not sha256"),
        ("nginx@sha256:" + "A" * 64, "not sha256"),
        ("@" + DIGEST, "no repository"),
        ("-bad.host/x", "registry"),
        ("a" * 300, "longer"),
        ("nginx:" + "t" * 129, "tag"),
    ],
)
def test_malformed(text: str, part: str) -> None:
    with pytest.raises(ImageReferenceError, match=part):
        ImageReference.from_string(text)


# No "." in components: without a host, a dotted first component is a registry host (as in Docker).
_component = st.from_regex(r"[a-z0-9]{1,8}(?:(?:_|__|-+)[a-z0-9]{1,8}){0,2}", fullmatch=True)
_host = st.one_of(
    st.just(""),
    st.just("localhost/"),
    st.from_regex(r"[a-z0-9]{1,10}\.[a-z]{2,5}(?::[0-9]{1,5})?/", fullmatch=True),
)


@given(
    host=_host,
    components=st.lists(_component, min_size=1, max_size=3),
    tag=st.one_of(st.none(), st.from_regex(r"[\w][\w.-]{0,20}", fullmatch=True)),
    digest=st.one_of(st.none(), st.from_regex(r"[0-9a-f]{64}", fullmatch=True)),
)
def test_valid_references_round_trip(
    host: str, components: list[str], tag: str | None, digest: str | None
) -> None:
    text = host + "/".join(components)
    if tag is not None:
        text += f":{tag}"
    if digest is not None:
        text += f"@sha256:{digest}"
    reference = ImageReference.from_string(text)
    assert ImageReference.from_string(str(reference)) == reference
    assert reference.repository.endswith("/".join(components))
    assert reference.tag == (tag if tag is not None or digest is not None else "latest")
    assert reference.digest == (None if digest is None else f"sha256:{digest}")


@given(st.text(max_size=80))
def test_arbitrary_text_parses_or_raises_reference_error(text: str) -> None:
    try:
        reference = ImageReference.from_string(text)
    except ImageReferenceError:
        return
    assert ImageReference.from_string(str(reference)) == reference
