"""Protobuf's wire format by hand, for the two UserAPI messages that carry every policy document.

At 10 000 generated workloads a SetManifest request carries about 545 MB of initdata. Through
protobuf (upb) both sides copy it over and over: the client built the message and serialised it
(three copies), the Coordinator parsed it (0.34-0.46 s) and then copied every document once more
out of the message (`list(request.Policies)`, 0.39-0.47 s). The message is five length-delimited
fields, so both ends are written here: `SetManifest.encode` gives exactly protobuf's
serialisation (fields in number order, empty ones left out, as proto3 writes them), and
`SetManifest.parse` reads what upb reads, each document copied once out of the received bytes,
and refuses what upb refuses (tests/api/test_wire.py compares the two on generated and mutated
encodings):

a varint cut short or longer than 10 bytes (a tag or a length: longer than 5 bytes, or a tag of
2^32 or more), field number 0, wire types 6 and 7, an end-group with no start-group, a length
past the end of the message, a fixed32/fixed64 cut short. Unknown fields are skipped as protobuf
skips them (varint, fixed64, length-delimited, fixed32), and so is a known field with another
wire type than its own (protobuf keeps it as an unknown field). Of a singular field given more
than once, the last one counts.

What a client never sends is left to upb, on the whole message (`FromString` and a copy of each
document, the path before): a group (deprecated; upb's rules for its insides differ from the
top level's) and a message of more than `FIELD_BUDGET` fields. The loop here runs in Python,
some 100 times slower per field than upb's: without the bound, a 1 GiB request of two-byte fields
would hold the interpreter for minutes where upb took a second or two.

The Coordinator's GetManifests answer, which carries every document back (`verify`), is written
the same way (`ManifestsResponse.encode`, exactly protobuf's serialisation).

The field numbers are userapi.proto's; `tests/api/test_wire.py` checks them against the
generated descriptors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from google.protobuf.message import DecodeError

from contrast.api import userapi_pb2
from contrast.api.errors import ApiError

VARINT, FIXED64, LENGTH_DELIMITED, START_GROUP, END_GROUP, FIXED32 = 0, 1, 2, 3, 4, 5
# The fields read here before the message is handed to upb: 10 000 workloads are ~10 005, and
# 200 000 cost ~0.1 s of CPU.
FIELD_BUDGET = 200_000


class MalformedMessage(ApiError):
    """Bytes that are not a protobuf encoding of the message they should be."""


def varint(value: int) -> bytes:
    """`value` (not negative) as a protobuf varint."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tag(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def bytes_field(number: int, value: bytes) -> list[bytes]:
    """A singular bytes field as proto3 writes it: nothing when empty (implicit presence)."""
    return [tag(number, LENGTH_DELIMITED), varint(len(value)), value] if value else []


def repeated_bytes_field(number: int, values: Sequence[bytes]) -> list[bytes]:
    """A repeated bytes field: every value (an empty one too) with its tag and length."""
    prefix = tag(number, LENGTH_DELIMITED)
    parts: list[bytes] = []
    for value in values:
        parts += (prefix + varint(len(value)), value)
    return parts


def read_varint(data: bytes, position: int, *, max_bytes: int = 10) -> tuple[int, int]:
    """The varint at `position` and the position after it. Like upb, bits past 64 are dropped
    rather than refused; more than `max_bytes` bytes or the end of `data` is malformed."""
    result = 0
    shift = 0
    end = min(len(data), position + max_bytes)
    while position < end:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, position
        shift += 7
    if position >= len(data):
        raise MalformedMessage("a varint is cut short")
    raise MalformedMessage(f"a varint is longer than {max_bytes} bytes")


def read_tag(data: bytes, position: int) -> tuple[int, int, int]:
    """(field number, wire type, position after the tag), as upb reads a message's tags."""
    if position < len(data) and data[position] < 0x80:  # the usual one-byte tag
        key, position = data[position], position + 1
    else:
        key, position = read_varint(data, position, max_bytes=5)
        if key >> 32:
            raise MalformedMessage("a tag is larger than 32 bits")
    number, wire_type = key >> 3, key & 7
    if number == 0:
        raise MalformedMessage("a field has number 0")
    if wire_type > FIXED32:
        raise MalformedMessage(f"a field has wire type {wire_type}")
    return number, wire_type, position


def read_length(data: bytes, position: int) -> tuple[int, int]:
    """The length at `position` and the position after it; the bytes must be there."""
    length, position = read_varint(data, position, max_bytes=5)
    if length > len(data) - position:
        raise MalformedMessage("a length-delimited field runs past the end of the message")
    return length, position


def skip_field(data: bytes, position: int, wire_type: int) -> int:
    """The position after the value of a field whose tag ended at `position` (an unknown field,
    or a known one with another wire type). Groups are not skipped here (see the module)."""
    if wire_type == VARINT:
        return read_varint(data, position)[1]
    if wire_type == LENGTH_DELIMITED:
        length, position = read_length(data, position)
        return position + length
    if wire_type in (FIXED64, FIXED32):
        end = position + (8 if wire_type == FIXED64 else 4)
        if end > len(data):
            raise MalformedMessage("a fixed-size field is cut short")
        return end
    if wire_type == END_GROUP:
        raise MalformedMessage("an end-group has no start-group")
    raise ValueError("a group is skipped by upb, not here")


@dataclass(frozen=True)
class SetManifest:
    """A SetManifestRequest (userapi.proto) as plain bytes: `encode` and `parse` are its wire
    form, without a protobuf message in between."""

    manifest: bytes
    policies: Sequence[bytes]
    previous_transition_hash: bytes = b""
    workload_owner_public_key: bytes = b""
    signature: bytes = b""

    MANIFEST: ClassVar[int] = 1
    POLICIES: ClassVar[int] = 2
    PREVIOUS_TRANSITION_HASH: ClassVar[int] = 3
    WORKLOAD_OWNER_PUBLIC_KEY: ClassVar[int] = 4
    SIGNATURE: ClassVar[int] = 5
    # The message `parse` reads: the Coordinator's status interceptor names it in its refusal
    # ("the request is not a contrast.userapi.SetManifestRequest message"), as for protobuf's.
    DESCRIPTOR: ClassVar[object] = userapi_pb2.SetManifestRequest.DESCRIPTOR

    def encode(self) -> bytes:
        """Exactly `SerializeToString()` of the same SetManifestRequest, joined once."""
        return b"".join(
            [
                *bytes_field(self.MANIFEST, self.manifest),
                *repeated_bytes_field(self.POLICIES, self.policies),
                *bytes_field(self.PREVIOUS_TRANSITION_HASH, self.previous_transition_hash),
                *bytes_field(self.WORKLOAD_OWNER_PUBLIC_KEY, self.workload_owner_public_key),
                *bytes_field(self.SIGNATURE, self.signature),
            ]
        )

    @classmethod
    def parse(cls, data: bytes) -> SetManifest:
        """The request `data` encodes, each document one copy of its bytes; what upb refuses
        raises `MalformedMessage`."""
        singular: dict[int, bytes] = {}
        policies: list[bytes] = []
        position = 0
        end = len(data)
        fields = 0
        while position < end:
            fields += 1
            if fields > FIELD_BUDGET:
                return cls.parse_with_upb(data)
            number, wire_type, position = read_tag(data, position)
            if wire_type == START_GROUP:
                return cls.parse_with_upb(data)
            if wire_type != LENGTH_DELIMITED or number > cls.SIGNATURE:
                position = skip_field(data, position, wire_type)
                continue
            length, position = read_length(data, position)
            value = data[position : position + length]
            position += length
            if number == cls.POLICIES:
                policies.append(value)
            else:
                singular[number] = value  # the last one counts, as in protobuf
        return cls(
            manifest=singular.get(cls.MANIFEST, b""),
            policies=policies,
            previous_transition_hash=singular.get(cls.PREVIOUS_TRANSITION_HASH, b""),
            workload_owner_public_key=singular.get(cls.WORKLOAD_OWNER_PUBLIC_KEY, b""),
            signature=singular.get(cls.SIGNATURE, b""),
        )

    @classmethod
    def parse_with_upb(cls, data: bytes) -> SetManifest:
        """`parse` through protobuf (upb): what it does with a message it leaves to upb."""
        try:
            message = userapi_pb2.SetManifestRequest.FromString(data)
        except DecodeError:
            raise MalformedMessage("the bytes are not a SetManifestRequest") from None
        return cls(
            manifest=message.Manifest,
            policies=list(message.Policies),
            previous_transition_hash=message.PreviousTransitionHash,
            workload_owner_public_key=message.WorkloadOwnerPublicKey,
            signature=message.Signature,
        )


@dataclass(frozen=True)
class ManifestsResponse:
    """A GetManifestsResponse (userapi.proto) as plain bytes; `encode` is its wire form.

    `verify` fetches every document back: at 10 000 real-size policies ~568 MB, which upb
    copied into the message, then into its serialisation, then into a Python bytes object
    (~1.3 s). Written here, the documents are copied once, by the join.
    """

    manifests: Sequence[bytes]
    policies: Sequence[bytes]
    root_ca: bytes
    mesh_ca: bytes
    transition_hash: bytes  # LatestTransition.TransitionHash
    signature: bytes  # LatestTransition.Signature
    previous_transition_hash: bytes
    generation: int

    MANIFESTS: ClassVar[int] = 1
    POLICIES: ClassVar[int] = 2
    ROOT_CA: ClassVar[int] = 3
    MESH_CA: ClassVar[int] = 4
    LATEST_TRANSITION: ClassVar[int] = 5  # a SignedTransition: TransitionHash = 1, Signature = 2
    PREVIOUS_TRANSITION_HASH: ClassVar[int] = 6
    GENERATION: ClassVar[int] = 7  # uint64

    def encode(self) -> bytes:
        """Exactly `SerializeToString()` of the same GetManifestsResponse, LatestTransition set
        (as the Coordinator always sets it, so it is written even when both its fields are
        empty), joined once."""
        latest = b"".join([*bytes_field(1, self.transition_hash), *bytes_field(2, self.signature)])
        generation = (
            [tag(self.GENERATION, VARINT), varint(self.generation)] if self.generation else []
        )
        return b"".join(
            [
                *repeated_bytes_field(self.MANIFESTS, self.manifests),
                *repeated_bytes_field(self.POLICIES, self.policies),
                *bytes_field(self.ROOT_CA, self.root_ca),
                *bytes_field(self.MESH_CA, self.mesh_ca),
                tag(self.LATEST_TRANSITION, LENGTH_DELIMITED),
                varint(len(latest)),
                latest,
                *bytes_field(self.PREVIOUS_TRANSITION_HASH, self.previous_transition_hash),
                *generation,
            ]
        )
