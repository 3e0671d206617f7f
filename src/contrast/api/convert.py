"""Between the wire messages and the domain types they carry."""

from __future__ import annotations

from contrast.api import evidence_pb2, userapi_pb2
from contrast.attestation.evidence import Evidence
from contrast.attestation.tee import platform_named
from contrast.seed.shares import SeedShare, SeedShareDocument


def evidence_to_proto(evidence: Evidence) -> evidence_pb2.Evidence:
    return evidence_pb2.Evidence(
        Platform=str(evidence.platform),
        Report=evidence.report,
        Endorsements=list(evidence.endorsements),
    )


def evidence_from_proto(message: evidence_pb2.Evidence) -> Evidence:
    # An unknown platform is malformed evidence, refused by attestation's own error.
    platform = platform_named(message.Platform)
    return Evidence(platform, message.Report, tuple(message.Endorsements))


def seed_shares_to_proto(document: SeedShareDocument) -> userapi_pb2.SeedShareDocument:
    return userapi_pb2.SeedShareDocument(
        SeedShares=[
            userapi_pb2.SeedShare(PublicKey=share.public_key, EncryptedSeed=share.encrypted_seed)
            for share in document.shares
        ],
        Salt=document.salt,
    )


def seed_shares_from_proto(message: userapi_pb2.SeedShareDocument) -> SeedShareDocument:
    shares = tuple(SeedShare(share.PublicKey, share.EncryptedSeed) for share in message.SeedShares)
    return SeedShareDocument(shares, message.Salt)
