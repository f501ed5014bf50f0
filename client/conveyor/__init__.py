"""Conveyor client: define pipelines, stream their batches, checkpoint and restore them.

The public face is this package's top: ``fn``, ``types``, ``errors``, ``TensorList``
(``tensor_list.py``), ``pipeline_def``, ``Client`` (``client.py``) and the ``conveyor``
command (``cli.py``). Beneath it, rooms by job, each saying in its ``__init__`` what it
holds and may import:

- ``definition/``: the definition contract (spec, graph, in-process pipeline, decorator,
  external sources, the operator schemas in ``definition/schemas/``); it imports no gRPC,
  so a trainer or the engine that only defines or runs pipelines in process never loads
  the transport;
- ``transport/``: one server: channel, credentials, connection, data channel, wire;
- ``remote/``: pipelines on servers and the fleet, on top of the transport: the cluster of
  servers and its calls with failover, the pipeline calls, ``RemotePipeline``, fan-in,
  ``open``; ``Client`` is its facade;
- the adapters: ``dali/`` (DALI's module names), ``torch/``, ``tf/``.

``import conveyor`` itself loads nothing more (no numpy, protobuf or gRPC): each public name
is imported from its module the first time it is used (``_PUBLIC``). A process that needs
one module (a parallel external source's worker: ``conveyor.definition.source_closures``
and ``conveyor.errors``) pays for that module alone.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from conveyor import errors, fn, types
    from conveyor.client import Checkpoint, Client, RemotePipeline
    from conveyor.definition.decorator import pipeline_def
    from conveyor.tensor_list import TensorList
    from conveyor.transport.credentials import TlsOptions

__version__ = "0.1.0"

#: Each public name -> the module that defines it (a module name alone: the name is that
#: submodule), imported the first time the name is used.
_PUBLIC = {
    "Checkpoint": "conveyor.client",
    "Client": "conveyor.client",
    "RemotePipeline": "conveyor.client",
    "TensorList": "conveyor.tensor_list",
    "TlsOptions": "conveyor.transport.credentials",
    "errors": "",
    "fn": "",
    "pipeline_def": "conveyor.definition.decorator",
    "types": "",
}

__all__ = [
    "Checkpoint", "Client", "RemotePipeline", "TensorList", "TlsOptions", "__version__",
    "errors", "fn", "pipeline_def", "types",
]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'conveyor' has no attribute {name!r}")
    if module:
        value = getattr(importlib.import_module(module), name)
    else:
        value = importlib.import_module(f"{__name__}.{name}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))

