from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class Evidence(_message.Message):
    __slots__ = ("Platform", "Report", "Endorsements")
    PLATFORM_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    ENDORSEMENTS_FIELD_NUMBER: _ClassVar[int]
    Platform: str
    Report: bytes
    Endorsements: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, Platform: _Optional[str] = ..., Report: _Optional[bytes] = ..., Endorsements: _Optional[_Iterable[bytes]] = ...) -> None: ...
