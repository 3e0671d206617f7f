"""Files generate reads from `--oci-layout` and the Docker config are bounded (issue 24, 7).

Each file is one byte over its bound, sparse: refused by its size before it is read, where an
unbounded reader would hold all of it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from contrast.boundedfile import FileTooLarge
from contrast.images.auth import CONFIG_MAX_BYTES, DockerConfig
from contrast.images.cache import MAX_BYTES as LAYER_CACHE_MAX_BYTES
from contrast.images.cache import LayerCache
from contrast.images.layout import LAYOUT_FILE_MAX_BYTES, OciLayout
from contrast.images.manifest import MAX_DOCUMENT_SIZE


def _sparse(path: Path, size: int) -> Path:
    with path.open("wb") as file:
        file.truncate(size)
    return path


def test_an_oversized_oci_index_is_refused(tmp_path: Path) -> None:
    (tmp_path / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    _sparse(tmp_path / "index.json", MAX_DOCUMENT_SIZE + 1)
    with pytest.raises(FileTooLarge, match=r"the OCI index .* is larger than 8 MiB") as raised:
        OciLayout(tmp_path)
    assert "--oci-layout takes a directory" in raised.value.explain()


def test_an_oversized_oci_layout_marker_is_refused(tmp_path: Path) -> None:
    _sparse(tmp_path / "oci-layout", LAYOUT_FILE_MAX_BYTES + 1)
    with pytest.raises(FileTooLarge, match=r"the OCI layout file .* is larger than 64 KiB"):
        OciLayout(tmp_path)


def test_an_oversized_docker_config_is_refused(tmp_path: Path) -> None:
    config = _sparse(tmp_path / "config.json", CONFIG_MAX_BYTES + 1)
    with pytest.raises(FileTooLarge, match=r"the Docker config .* is larger than 16 MiB"):
        DockerConfig.load(config)


def test_an_oversized_layer_cache_is_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A cache is not an input to refuse: one that is too large is warned about and rebuilt."""
    path = _sparse(tmp_path / "layers-cache.json", LAYER_CACHE_MAX_BYTES + 1)
    with caplog.at_level(logging.WARNING):
        cache = LayerCache(path)
    assert cache.get("sha256:" + "0" * 64) is None
    assert "is larger than 64 MiB" in caplog.text
