"""The bodies of Vault's transit encrypt and decrypt requests, as far as the Coordinator serves.

Field names and encodings are Vault's (openbao.org/api-docs/secret/transit): `plaintext` and
`associated_data` are base64, `key_version` a number (or a numeric string, as Vault's framework
takes it). A field the engine does not implement (`context`, `nonce`, `batch_input`, ...) is
refused by name rather than ignored: a client that asks for convergent encryption or a batch must
not get something else silently.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

from contrast.coordinator.transit.cipher import FIRST_VERSION, Ciphertext, check_version
from contrast.coordinator.transit.errors import BadRequest

ENCRYPT_FIELDS = ("plaintext", "key_version", "associated_data")
DECRYPT_FIELDS = ("ciphertext", "associated_data")


@dataclass(frozen=True)
class EncryptRequest:
    plaintext: bytes = field(repr=False)
    # Vault's 0 (or nothing) is "the latest version"; a key of the Coordinator is never rotated,
    # so its latest version is 1. Another version is another key, derived the same way.
    key_version: int
    associated_data: bytes | None = field(repr=False)


@dataclass(frozen=True)
class DecryptRequest:
    ciphertext: Ciphertext
    associated_data: bytes | None = field(repr=False)


def parse_encrypt(body: bytes) -> EncryptRequest:
    fields = _object(body, ENCRYPT_FIELDS)
    if "plaintext" not in fields:
        raise BadRequest("missing plaintext to encrypt")
    return EncryptRequest(
        plaintext=_base64(fields, "plaintext"),
        key_version=_key_version(fields.get("key_version")),
        associated_data=_optional_base64(fields, "associated_data"),
    )


def parse_decrypt(body: bytes) -> DecryptRequest:
    fields = _object(body, DECRYPT_FIELDS)
    text = fields.get("ciphertext")
    if not isinstance(text, str) or not text:
        raise BadRequest("missing ciphertext to decrypt")
    return DecryptRequest(
        ciphertext=Ciphertext.from_text(text),
        associated_data=_optional_base64(fields, "associated_data"),
    )


def _object(body: bytes, allowed: tuple[str, ...]) -> dict[str, Any]:
    try:
        value = json.loads(body) if body.strip() else {}
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("the request body is not JSON") from None
    if not isinstance(value, dict):
        raise BadRequest("the request body is not a JSON object")
    # Vault drops null fields before it looks at them; so do we.
    fields = {key: item for key, item in value.items() if item is not None}
    for name in fields:
        if name not in allowed:
            raise BadRequest(
                f"{name[:64]!r} is not supported by the Coordinator's transit engine (this"
                f" endpoint takes {', '.join(allowed)})"
            )
    return fields


def _base64(fields: dict[str, Any], name: str) -> bytes:
    value = fields[name]
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error:
        raise BadRequest(f"{name} is not valid base64") from None


def _optional_base64(fields: dict[str, Any], name: str) -> bytes | None:
    return _base64(fields, name) if name in fields else None


def _key_version(value: object) -> int:
    if value is None:
        return FIRST_VERSION
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 10:
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadRequest("key_version must be a whole number")
    if value == 0:
        return FIRST_VERSION
    return check_version(value)
