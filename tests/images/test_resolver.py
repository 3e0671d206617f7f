"""Resolution end to end against a real registry on loopback and OCI layouts on disk."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path

import pytest

from contrast.images.model import ImageConfig, ImageError
from contrast.images.progress import PullProgress
from contrast.images.registry import RegistryError
from contrast.images.resolver import ImageResolver
from contrast.images.streams import DigestMismatch
from tests.images import imagebuild as build
from tests.images.conftest import Registry
from tests.images.pusher import Pusher

_names = itertools.count()

PASSWD_BASE = "root:x:0:0:root:/root:/bin/sh\ndaemon:x:1:1::/:/sbin/nologin\n"
GROUP_BASE = "root:x:0:\ndaemon:x:1:\n"
PASSWD_APP = PASSWD_BASE + "app:x:1000:1000::/home/app:/bin/sh\n"


def repository() -> str:
    """A fresh repository per test, so tests sharing the registry do not see each other."""
    return f"test/app{next(_names)}"


def base_layer() -> build.Layer:
    return build.layer(
        [
            build.directory("etc"),
            build.file("etc/passwd", PASSWD_BASE),
            build.file("etc/group", GROUP_BASE),
            build.file("bin/sh", b"\x7fELF" + bytes(5000)),
        ]
    )


def resolver(registry: Registry, **options: object) -> ImageResolver:
    return ImageResolver(insecure_registries=[registry.host], **options)  # type: ignore[arg-type]


def test_config_and_users_merged_across_layers(registry: Registry, tmp_path: Path) -> None:
    app = build.layer([build.file("./etc/passwd", PASSWD_APP), build.file("app/run", "#!/bin/sh")])
    drop_group = build.layer([build.file("etc/.wh.group", "")])
    config = {
        "User": "app",
        "Env": ["PATH=/bin", "A=b"],
        "Entrypoint": ["/app/run"],
        "Cmd": ["--serve"],
        "WorkingDir": "/app",
        "Volumes": {"/data": {}},
    }
    image = build.image([base_layer(), app, drop_group], config)
    name = repository()
    Pusher(registry.host).image(name, "v1", image)
    reference = f"{registry.host}/{name}:v1"

    facts = resolver(registry).resolve([reference])[reference]

    assert facts.reference == reference
    assert facts.digest == image.digest
    assert facts.config == ImageConfig(
        user="app",
        env=("PATH=/bin", "A=b"),
        entrypoint=("/app/run",),
        cmd=("--serve",),
        working_dir="/app",
        volumes=("/data",),
    )
    assert facts.etc_passwd == PASSWD_APP
    assert facts.etc_group == ""  # whited out by the top layer
    assert facts.compressed_size == sum(len(layer.blob.data) for layer in image.layers)
    assert facts.uncompressed_size == sum(layer.uncompressed_size for layer in image.layers)


def test_opaque_etc_and_etc_whiteout(registry: Registry) -> None:
    opaque = build.layer([build.file("etc/.wh..wh..opq", ""), build.file("etc/group", "g:x:5:\n")])
    no_etc = build.layer([build.file(".wh.etc", "")])
    new_etc = build.layer([build.file("etc/passwd", "n:x:9:9::/:/bin/sh\n")])
    name = repository()
    pusher = Pusher(registry.host)
    pusher.image(name, "opaque", build.image([base_layer(), opaque]))
    pusher.image(name, "gone", build.image([base_layer(), opaque, no_etc]))
    pusher.image(name, "again", build.image([base_layer(), no_etc, new_etc]))
    references = [f"{registry.host}/{name}:{tag}" for tag in ("opaque", "gone", "again")]

    facts = resolver(registry).resolve(references)

    opaque_facts, gone, again = (facts[reference] for reference in references)
    assert (opaque_facts.etc_passwd, opaque_facts.etc_group) == ("", "g:x:5:\n")
    assert (gone.etc_passwd, gone.etc_group) == ("", "")
    assert (again.etc_passwd, again.etc_group) == ("n:x:9:9::/:/bin/sh\n", "")


def test_digest_pinning_by_digest_and_by_tag_and_digest(registry: Registry) -> None:
    image = build.image([base_layer()], {"User": "daemon"})
    name = repository()
    Pusher(registry.host).image(name, "v1", image)
    by_digest = f"{registry.host}/{name}@{image.digest}"
    both = f"{registry.host}/{name}:v1@{image.digest}"

    facts = resolver(registry).resolve([by_digest, both])

    assert facts[by_digest].digest == image.digest == facts[both].digest
    assert facts[both].config.user == "daemon"


def test_pinned_digest_not_served_is_not_found(registry: Registry) -> None:
    image = build.image([base_layer()])
    name = repository()
    Pusher(registry.host).image(name, "v1", image)
    other = build.image([base_layer()], {"User": "nobody"})

    with pytest.raises(RegistryError) as caught:
        resolver(registry).resolve([f"{registry.host}/{name}:v1@{other.digest}"])

    assert "not found" in str(caught.value)
    assert caught.value.hint is not None


def test_missing_tag_and_repository(registry: Registry) -> None:
    name = repository()
    Pusher(registry.host).image(name, "v1", build.image([base_layer()]))
    for reference in (f"{registry.host}/{name}:v2", f"{registry.host}/no/such:v1"):
        with pytest.raises(RegistryError, match="not found"):
            resolver(registry).resolve([reference])


@pytest.mark.parametrize("docker", [False, True], ids=["oci-index", "docker-manifest-list"])
def test_index_picks_linux_amd64(registry: Registry, docker: bool) -> None:
    arm = build.image([base_layer()], {"User": "arm"}, docker=docker, architecture="arm64")
    amd = build.image(
        [
            base_layer(),
            build.layer([build.file("etc/passwd", "x:x:7:7::/:/bin/sh\n")], docker=docker),
        ],
        {"User": "amd"},
        docker=docker,
    )
    multi = build.index([("linux/arm64", arm), ("linux/amd64", amd)], docker=docker)
    name = repository()
    Pusher(registry.host).image(name, "multi", multi)
    reference = f"{registry.host}/{name}:multi"

    facts = resolver(registry).resolve([reference])[reference]

    assert facts.digest == multi.digest  # what pins the image for every platform
    assert facts.config.user == "amd"
    assert facts.etc_passwd == "x:x:7:7::/:/bin/sh\n"


def test_index_without_amd64_says_what_it_offers(registry: Registry) -> None:
    arm = build.image([base_layer()], architecture="arm64")
    name = repository()
    Pusher(registry.host).image(name, "arm", build.index([("linux/arm64", arm)]))

    with pytest.raises(ImageError, match="linux/arm64"):
        resolver(registry).resolve([f"{registry.host}/{name}:arm"])


def test_corrupted_layer_blob_is_a_digest_error_naming_the_layer(registry: Registry) -> None:
    image = build.image([base_layer(), build.layer([build.file("app/x", "data" * 100)])])
    name = repository()
    Pusher(registry.host).image(name, "v1", image)
    stored = registry.blob_path(image.layers[1].blob.digest)
    data = bytearray(stored.read_bytes())
    data[-20] ^= 0xFF  # inside the gzip trailer region: still the same length
    stored.write_bytes(bytes(data))

    with pytest.raises(DigestMismatch) as caught:
        resolver(registry).resolve([f"{registry.host}/{name}:v1"])

    assert "layer 2" in str(caught.value)
    assert image.layers[1].blob.digest in str(caught.value)


def test_wrong_diff_id_is_reported(registry: Registry) -> None:
    layer = base_layer()
    wrong = "sha256:" + "0" * 64
    image = build.image([layer], diff_ids=[wrong])
    name = repository()
    Pusher(registry.host).image(name, "v1", image)

    with pytest.raises(DigestMismatch, match="diff_id"):
        resolver(registry).resolve([f"{registry.host}/{name}:v1"])


def test_cache_hit_downloads_no_layer(registry: Registry, tmp_path: Path) -> None:
    image = build.image([base_layer(), build.layer([build.file("etc/group", "c:x:3:\n")])])
    name = repository()
    Pusher(registry.host).image(name, "v1", image)
    reference = f"{registry.host}/{name}:v1"
    cache = tmp_path / "layers-cache.json"

    first = resolver(registry, cache_path=cache).resolve([reference])[reference]
    for layer in image.layers:
        registry.blob_path(layer.blob.digest).unlink()  # a download would now fail
    second = resolver(registry, cache_path=cache).resolve([reference])[reference]

    assert second == first
    assert second.etc_group == "c:x:3:\n"
    assert second.uncompressed_size == sum(layer.uncompressed_size for layer in image.layers)
    with pytest.raises(ImageError):
        resolver(registry).resolve([reference])  # without the cache the layers are needed


def test_corrupt_cache_is_rebuilt(registry: Registry, tmp_path: Path) -> None:
    image = build.image([base_layer()])
    name = repository()
    Pusher(registry.host).image(name, "v1", image)
    cache = tmp_path / "layers-cache.json"
    cache.write_text('[{"diff_id": "sha256:tr')
    reference = f"{registry.host}/{name}:v1"

    facts = resolver(registry, cache_path=cache).resolve([reference])[reference]

    assert facts.etc_passwd == PASSWD_BASE
    entries = json.loads(cache.read_text())
    assert [entry["diff_id"] for entry in entries] == [image.layers[0].diff_id]


def test_duplicates_are_fetched_once(registry: Registry) -> None:
    shared = base_layer()
    first = build.image([shared], {"User": "one"})
    second = build.image([shared, build.layer([build.file("x", "y")])], {"User": "two"})
    name = repository()
    pusher = Pusher(registry.host)
    pusher.image(name, "one", first)
    pusher.image(name, "two", second)
    one = f"{registry.host}/{name}:one"
    references = [one, one, f"{registry.host}/{name}:one", f"{registry.host}/{name}:two"]

    facts = resolver(registry).resolve(references)

    assert set(facts) == {one, f"{registry.host}/{name}:two"}
    assert facts[one].config.user == "one"
    assert registry.requests(f"GET /v2/{name}/manifests/one ") == 1
    assert registry.requests(f"GET /v2/{name}/blobs/{shared.blob.digest} ") == 1


def test_normalised_spellings_keep_their_keys(registry: Registry) -> None:
    name = repository()
    Pusher(registry.host).image(name, "latest", build.image([base_layer()]))
    short, full = f"{registry.host}/{name}", f"{registry.host}/{name}:latest"

    facts = resolver(registry).resolve([short, full])

    assert facts[short].reference == short
    assert facts[full].reference == full
    assert facts[short].digest == facts[full].digest
    assert registry.requests(f"GET /v2/{name}/manifests/latest ") == 1


def test_progress_line_counts_layers(registry: Registry) -> None:
    image = build.image([base_layer(), build.layer([build.file("a", "b")])])
    name = repository()
    Pusher(registry.host).image(name, "v1", image)
    output = io.StringIO()
    progress = PullProgress(output, enabled=True)

    resolver(registry, progress=progress).resolve([f"{registry.host}/{name}:v1"])

    text = output.getvalue()
    assert "\rpulling layers: 2/2 done" in text
    assert text.endswith("\n")
    assert PullProgress(io.StringIO()).enabled is False  # not a terminal: silent


def test_unreachable_registry_is_a_clear_error() -> None:
    from contrast.local.processes import free_port

    host = f"127.0.0.1:{free_port()}"
    with pytest.raises(RegistryError, match="cannot reach") as caught:
        ImageResolver(insecure_registries=[host]).resolve([f"{host}/a/b:c"])
    assert "insecure" in (caught.value.hint or "")


# OCI layouts


def layout_images() -> tuple[build.Image, build.Image]:
    first = build.image([base_layer()], {"User": "first"})
    second = build.image(
        [base_layer(), build.layer([build.file("etc/passwd", PASSWD_APP)])], {"User": "second"}
    )
    return first, second


def test_layout_by_full_and_tag_ref_name(tmp_path: Path) -> None:
    first, second = layout_images()
    build.write_layout(tmp_path / "one", [(first, "example.com/team/first:1.0")])
    build.write_layout(tmp_path / "two", [(second, "2.0")])
    resolver = ImageResolver(oci_layouts=[tmp_path / "one", tmp_path / "two"])

    facts = resolver.resolve(["example.com/team/first:1.0", "example.com/other/second:2.0"])

    assert facts["example.com/team/first:1.0"].config.user == "first"
    assert facts["example.com/team/first:1.0"].digest == first.digest
    assert facts["example.com/other/second:2.0"].etc_passwd == PASSWD_APP


def test_layout_by_digest_and_index_member(tmp_path: Path) -> None:
    first, second = layout_images()
    multi = build.index([("linux/amd64", second)])
    build.write_layout(tmp_path / "layout", [(first, None), (multi, "multi")])
    resolver = ImageResolver(oci_layouts=[tmp_path / "layout"])
    by_digest = f"anything.example/x@{first.digest}"
    member = f"elsewhere.example/y:tag@{second.digest}"  # inside the index only

    facts = resolver.resolve([by_digest, member, "example.org/z:multi"])

    assert facts[by_digest].config.user == "first"
    assert facts[member].config.user == "second"
    assert facts["example.org/z:multi"].digest == multi.digest


def test_layout_is_consulted_before_the_registry(registry: Registry, tmp_path: Path) -> None:
    first, _ = layout_images()
    name = repository()
    reference = f"{registry.host}/{name}:v1"
    build.write_layout(tmp_path / "layout", [(first, reference)])

    facts = resolver(registry, oci_layouts=[tmp_path / "layout"]).resolve([reference])

    assert facts[reference].config.user == "first"
    assert registry.requests(f"/v2/{name}/") == 0


def test_layout_with_corrupted_blob_and_missing_entry(tmp_path: Path) -> None:
    first, _ = layout_images()
    build.write_layout(tmp_path / "layout", [(first, "v1")])
    config_path = tmp_path / "layout/blobs/sha256" / first.config.digest.removeprefix("sha256:")
    config_path.write_bytes(config_path.read_bytes().replace(b"first", b"fxrst"))
    resolver = ImageResolver(oci_layouts=[tmp_path / "layout"], workers=1)

    with pytest.raises(DigestMismatch, match="config"):
        resolver.resolve(["example.com/a:v1"])
    with pytest.raises(ImageError, match="not an OCI image layout"):
        ImageResolver(oci_layouts=[tmp_path])
