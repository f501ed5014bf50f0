"""DALI's ``nvidia.dali.plugin.pytorch.experimental.proxy`` (``DALIServer``, ``DataLoader``):
importable, refused when used.

DALI's proxy runs one pipeline in the training process and feeds it from the workers of a
torch ``DataLoader``. Conveyor runs the pipeline elsewhere already: in this process
(``DALIClassificationIterator`` over a ``@pipeline_def`` pipeline), on a server
(``conveyor.connect(...).open(...)``), or in worker processes (``conveyor.torch``). So each
name here raises ``NotSupported`` saying which of those to use. Imports no torch.
"""

from __future__ import annotations

from typing import Any, NoReturn

from conveyor.definition.unsupported import PORTING_PAGE
from conveyor.errors import NotSupported

__all__ = ["DALIServer", "DataLoader"]

#: What a script written for DALI's proxy uses instead, said by every refusal.
INSTEAD = (
    "Conveyor has no DALI proxy: let the pipeline read its files itself "
    "(fn.readers.file, or an external source) and iterate it with "
    "conveyor.dali.plugin.pytorch.DALIClassificationIterator (in this process or over a "
    "server's pipeline, conveyor.connect(...).open(...)), or use conveyor.torch's "
    "dataset with a torch DataLoader; see " + PORTING_PAGE)


def _refuse(name: str) -> NoReturn:
    raise NotSupported(f"plugin.pytorch.experimental.proxy.{name}", None,
                       f"DALI's proxy is not supported by Conveyor. {INSTEAD}")


class DALIServer:
    """DALI's ``DALIServer``: refused (``NotSupported``), naming what to use instead."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _refuse("DALIServer")


class DataLoader:
    """DALI's proxy ``DataLoader``: refused (``NotSupported``), naming what to use instead."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _refuse("DataLoader")


def __getattr__(name: str) -> Any:
    """Any other name of DALI's proxy module: ``NotSupported`` (an ``AttributeError``)."""
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _refuse(name)
