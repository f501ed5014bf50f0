"""Named constants of the pipeline API, spelled as in DALI (``types.RGB``, ``types.FLOAT``)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from conveyor.definition.external_source import BatchInfo, SampleInfo
from conveyor.definition.unsupported import PORTING_PAGE, not_supported


class DALIImageType(StrEnum):
    RGB = "RGB"
    BGR = "BGR"
    GRAY = "GRAY"


class DALIDataType(StrEnum):
    UINT8 = "uint8"
    INT8 = "int8"
    UINT16 = "uint16"
    UINT32 = "uint32"
    UINT64 = "uint64"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    FLOAT16 = "float16"
    FLOAT = "float32"
    FLOAT64 = "float64"
    BOOL = "bool"


class DALIInterpType(StrEnum):
    INTERP_NN = "nn"
    INTERP_LINEAR = "linear"
    INTERP_CUBIC = "cubic"
    INTERP_LANCZOS3 = "lanczos3"
    #: DALI's triangular filter, which DALI itself resamples as linear: the triangular
    #: filter when shrinking with ``antialias`` (its default), linear interpolation when
    #: enlarging or without ``antialias``; so it is ``INTERP_LINEAR`` (an alias) here.
    INTERP_TRIANGULAR = "linear"


RGB = DALIImageType.RGB
BGR = DALIImageType.BGR
GRAY = DALIImageType.GRAY

UINT8 = DALIDataType.UINT8
INT8 = DALIDataType.INT8
UINT16 = DALIDataType.UINT16
UINT32 = DALIDataType.UINT32
UINT64 = DALIDataType.UINT64
INT16 = DALIDataType.INT16
INT32 = DALIDataType.INT32
INT64 = DALIDataType.INT64
FLOAT16 = DALIDataType.FLOAT16
FLOAT = DALIDataType.FLOAT
FLOAT64 = DALIDataType.FLOAT64
BOOL = DALIDataType.BOOL

INTERP_NN = DALIInterpType.INTERP_NN
INTERP_LINEAR = DALIInterpType.INTERP_LINEAR
INTERP_CUBIC = DALIInterpType.INTERP_CUBIC
INTERP_LANCZOS3 = DALIInterpType.INTERP_LANCZOS3
INTERP_TRIANGULAR = DALIInterpType.INTERP_TRIANGULAR

#: DALI's ``types.SampleInfo`` and ``types.BatchInfo``: what an external source is given.
INFO_TYPES = (SampleInfo, BatchInfo)
#: This module's names that are no constants of the pipeline API.
_NOT_CONSTANTS = {"annotations", "StrEnum", "Any", "PORTING_PAGE", "not_supported"}


def __getattr__(name: str) -> Any:
    """A name DALI's ``types`` has and this module not (``types.INTERP_GAUSSIAN``):
    ``NotSupported`` (an ``AttributeError``), naming the close constants."""
    if name.startswith("_"):
        raise AttributeError(f"module 'conveyor.types' has no attribute {name!r}")
    known = [n for n in globals() if not n.startswith("_") and n not in _NOT_CONSTANTS]
    raise not_supported("the constant", name, known, op="types", page=PORTING_PAGE,
                        spell="types.{}")
