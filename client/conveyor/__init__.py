"""Conveyor client: define pipelines, stream their batches, checkpoint and restore them.

Two layers. The definition contract (``fn``, ``pipeline_def``, ``types``, ``errors``,
``TensorList``, the schemas and the spec) imports no gRPC: a trainer or the engine that only
defines or runs pipelines in process never loads the transport. The transport (``Client``,
``RemotePipeline``, ``Checkpoint``, ``TlsOptions``: client, connection, channel, credentials,
opening, remote, fan-in, wire) is imported the first time one of its names is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from conveyor import errors, fn, types
from conveyor.pipeline_def import pipeline_def
from conveyor.tensor_list import TensorList

if TYPE_CHECKING:
    from conveyor.client import Checkpoint, Client, RemotePipeline
    from conveyor.credentials import TlsOptions

__version__ = "0.1.0"

#: The transport's public names -> the module that defines each, imported on first use.
_TRANSPORT = {
    "Checkpoint": "conveyor.client",
    "Client": "conveyor.client",
    "RemotePipeline": "conveyor.client",
    "TlsOptions": "conveyor.credentials",
}

__all__ = [
    "Checkpoint", "Client", "RemotePipeline", "TensorList", "TlsOptions", "__version__",
    "errors", "fn", "pipeline_def", "types",
]


def __getattr__(name: str) -> Any:
    module = _TRANSPORT.get(name)
    if module is None:
        raise AttributeError(f"module 'conveyor' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_TRANSPORT))
