"""Owner keys as the workspace reads them."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from contrast.client.workspace import (
    WorkspaceError,
    generate_seedshare_owner_key,
    generate_workload_owner_key,
    load_seedshare_owner_key,
    load_seedshare_owner_public_key,
)

PUBLIC = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def test_the_public_half_is_the_validated_key_s(tmp_path: Path) -> None:
    path = tmp_path / "seedshare-owner.pem"
    path.write_bytes(generate_seedshare_owner_key())
    expected = load_seedshare_owner_key(path).public_key().public_bytes(*PUBLIC)
    assert load_seedshare_owner_public_key(path).public_bytes(*PUBLIC) == expected


def test_the_public_half_of_something_else_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "seedshare-owner.pem"
    path.write_bytes(generate_workload_owner_key())
    with pytest.raises(WorkspaceError, match="is not an RSA key"):
        load_seedshare_owner_public_key(path)
    path.write_text("not a key")
    with pytest.raises(WorkspaceError, match="not an unencrypted PEM private key"):
        load_seedshare_owner_public_key(path)
