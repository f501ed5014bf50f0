from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class Datum(_message.Message):
    __slots__ = ("channels", "height", "width", "data", "label", "float_data", "encoded")
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    FLOAT_DATA_FIELD_NUMBER: _ClassVar[int]
    ENCODED_FIELD_NUMBER: _ClassVar[int]
    channels: int
    height: int
    width: int
    data: bytes
    label: int
    float_data: _containers.RepeatedScalarFieldContainer[float]
    encoded: bool
    def __init__(self, channels: _Optional[int] = ..., height: _Optional[int] = ..., width: _Optional[int] = ..., data: _Optional[bytes] = ..., label: _Optional[int] = ..., float_data: _Optional[_Iterable[float]] = ..., encoded: _Optional[bool] = ...) -> None: ...
