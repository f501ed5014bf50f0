"""What an external source's callable is given, and how a callable is named in a spec.

An external source is a Python callable asked for the data of one position, DALI's
checkpointable kind: with ``batch=False`` it takes a ``SampleInfo`` and returns one
sample; with ``batch=True`` a ``BatchInfo`` (``batch_info=True``) or the iteration number
and returns one batch. ``StopIteration`` ends the epoch.

A spec names its source ``"module:function"``. A server calls only the callables its
configuration lists (``external_sources``); in a trainer's process, ``fn.external_source``
given a callable names it after its module and qualified name and remembers it here, so
the in-process ``Pipeline`` calls that callable (the last one given under a name wins).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from conveyor.errors import InvalidArgument

#: A source's callable: one argument (SampleInfo, BatchInfo or the iteration number).
Source = Callable[[Any], Any]


@dataclass(frozen=True)
class SampleInfo:
    """One sample's position, as DALI's ``types.SampleInfo``."""

    #: The sample's index in its epoch (``iteration * batch_size + idx_in_batch``).
    idx_in_epoch: int
    idx_in_batch: int
    #: The batch's index in its epoch.
    iteration: int
    epoch_idx: int


@dataclass(frozen=True)
class BatchInfo:
    """One batch's position, as DALI's ``types.BatchInfo``."""

    iteration: int
    epoch_idx: int


_local: dict[str, Source] = {}
_lock = threading.Lock()


def source_name(source: Source) -> str:
    """``"module:qualified.name"`` of a callable, as a spec names it."""
    module = getattr(source, "__module__", None)
    name = getattr(source, "__qualname__", None) or getattr(source, "__name__", None)
    if not module or not name:
        raise InvalidArgument(f"external_source: argument 'source': {source!r} has no module "
                              "and name to be named by")
    return f"{module}:{name}"


def remember(source: Source) -> str:
    """Name ``source`` and keep it for in-process pipelines; returns its name."""
    name = source_name(source)
    with _lock:
        _local[name] = source
    return name


def remembered(name: str) -> Source | None:
    """The callable ``fn.external_source`` was last given under ``name`` in this process."""
    with _lock:
        return _local.get(name)


def check_name(name: str, where: str = "external_source: argument 'source'") -> tuple[str, str]:
    """(module, attribute path) of ``"module:function"``, or InvalidArgument naming it."""
    module, sep, attr = name.partition(":")
    if not sep or not module or not attr or not all(
            part.isidentifier() for part in (*module.split("."), *attr.split("."))):
        raise InvalidArgument(f"{where}: got {name!r}, expected 'module:function' (dotted "
                              "Python names)")
    return module, attr


def import_source(name: str, where: str = "external_source: argument 'source'") -> Source:
    """Import ``"module:function"``; InvalidArgument naming it if that fails or it is not
    callable."""
    module_name, attr = check_name(name, where)
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise InvalidArgument(f"{where}: cannot import {name!r}: {type(exc).__name__}: "
                              f"{exc}") from None
    if not callable(target):
        raise InvalidArgument(f"{where}: {name!r} is not callable")
    return target


def check_parallel(source: Source) -> str:
    """The name of ``source`` for ``parallel=True``, where each worker process imports it by
    that name; InvalidArgument saying why and what to do where that import would not give
    ``source`` itself (a lambda, a closure, a bound method, a callable object)."""
    where = "external_source: argument 'source' (parallel=True)"
    module = getattr(source, "__module__", None)
    qualname = getattr(source, "__qualname__", None)
    described = f"{source!r}"
    if not module or not qualname:
        raise InvalidArgument(f"{where}: {described} has no module and name, so worker "
                              "processes cannot import it: give a function defined at the top "
                              "level of a module (DALI requires picklable callables too)")
    name = f"{module}:{qualname}"
    if "<lambda>" in qualname or "<locals>" in qualname:
        kind = "a lambda" if "<lambda>" in qualname else "defined inside a function"
        raise InvalidArgument(f"{where}: {name!r} is {kind}, so worker processes cannot "
                              "import it by name: define it with def at the top level of a "
                              "module, or use parallel=False")
    try:
        found = import_source(name, where)
    except InvalidArgument as exc:
        raise InvalidArgument(f"{exc}: worker processes import the source by name; give a "
                              "function defined at the top level of a module") from None
    if found is not source:
        raise InvalidArgument(f"{where}: importing {name!r} gives {found!r}, not {described} "
                              "(a bound method or a callable object is not what its name "
                              "imports): worker processes import the source by name, so give "
                              "a function defined at the top level of a module")
    return name
