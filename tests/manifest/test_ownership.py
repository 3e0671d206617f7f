"""Owner signatures over (manifest, previous transition): who may update, and no replay."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from contrast.atls.reportdata import public_key_der
from contrast.manifest.ownership import (
    OwnershipError,
    owner_key_digest,
    sign_update,
    transition_digest,
    verify_update,
)

OWNER = ec.generate_private_key(ec.SECP384R1())
OWNER_DER = public_key_der(OWNER.public_key())
PREVIOUS = bytes(range(32))


def test_owner_signature_is_accepted() -> None:
    signature = sign_update(OWNER, b"manifest", PREVIOUS)
    verify_update(
        OWNER_DER, signature, b"manifest", PREVIOUS, allowed_digests=(owner_key_digest(OWNER_DER),)
    )


def test_transition_digest_binds_both_inputs() -> None:
    base = transition_digest(b"manifest", PREVIOUS)
    assert base != transition_digest(b"manifest!", PREVIOUS)
    assert base != transition_digest(b"manifest", bytes(32))


@pytest.mark.parametrize(
    ("manifest", "previous", "message"),
    [
        (b"other manifest", PREVIOUS, "does not verify"),
        (b"manifest", bytes(32), "does not verify"),  # replayed onto another state
    ],
)
def test_signature_does_not_carry_over(manifest: bytes, previous: bytes, message: str) -> None:
    signature = sign_update(OWNER, b"manifest", PREVIOUS)
    with pytest.raises(OwnershipError, match=message):
        verify_update(
            OWNER_DER, signature, manifest, previous, allowed_digests=(owner_key_digest(OWNER_DER),)
        )


def test_unlisted_key_is_refused() -> None:
    stranger = ec.generate_private_key(ec.SECP384R1())
    signature = sign_update(stranger, b"manifest", PREVIOUS)
    with pytest.raises(OwnershipError, match="does not list as workload owner"):
        verify_update(
            public_key_der(stranger.public_key()),
            signature,
            b"manifest",
            PREVIOUS,
            allowed_digests=(owner_key_digest(OWNER_DER),),
        )


def test_listed_key_with_someone_elses_signature_is_refused() -> None:
    stranger = ec.generate_private_key(ec.SECP384R1())
    signature = sign_update(stranger, b"manifest", PREVIOUS)
    with pytest.raises(OwnershipError, match="does not verify"):
        verify_update(
            OWNER_DER,
            signature,
            b"manifest",
            PREVIOUS,
            allowed_digests=(owner_key_digest(OWNER_DER),),
        )


def test_no_owners_means_no_updates() -> None:
    with pytest.raises(OwnershipError, match="allows no updates"):
        verify_update(OWNER_DER, b"sig", b"manifest", PREVIOUS, allowed_digests=())
