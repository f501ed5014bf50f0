"""DALI's ``nvidia.dali.tfrecord``: ``FixedLenFeature``, ``VarLenFeature`` and the types
``int64``, ``float32``, ``string`` (they are ``conveyor.definition.tfrecord``'s)."""

from __future__ import annotations

from conveyor.definition.tfrecord import (
    Feature,
    FixedLenFeature,
    VarLenFeature,
    float32,
    int64,
    string,
)

__all__ = ["Feature", "FixedLenFeature", "VarLenFeature", "float32", "int64", "string"]
