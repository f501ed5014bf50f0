"""DALI's ``nvidia.dali.types``: every name is ``conveyor.types``'s (``types.RGB``, ...)."""

from __future__ import annotations

from typing import Any

from conveyor import types as _types


def __getattr__(name: str) -> Any:
    return getattr(_types, name)


def __dir__() -> list[str]:
    return dir(_types)
