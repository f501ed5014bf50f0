"""DALI's ``nvidia.dali.fn``: every name is ``conveyor.fn``'s (``fn.readers.file``, ...)."""

from __future__ import annotations

from typing import Any

from conveyor import fn as _fn


def __getattr__(name: str) -> Any:
    return getattr(_fn, name)


def __dir__() -> list[str]:
    return dir(_fn)
