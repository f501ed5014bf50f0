"""What an external source's callable is given, and how a callable is named in a spec.

An external source is a Python callable asked for the data of one position, DALI's
checkpointable kind: with ``batch=False`` it takes a ``SampleInfo`` and returns one
sample; with ``batch=True`` a ``BatchInfo`` (``batch_info=True``) or the iteration number
and returns one batch. ``StopIteration`` ends the epoch.

A spec names its source ``"module:function"``. A server calls only the callables its
configuration lists (``external_sources``); in a trainer's process, ``fn.external_source``
given a callable names it after its module and qualified name and remembers it here, so
the in-process ``Pipeline`` calls that callable. Closures, lambdas and other callables
get a suffix that keeps each apart (``source_name``).
"""

from __future__ import annotations

import hashlib
import importlib
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from conveyor.definition import source_closures as closures
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
#: Descriptions of the closures remembered, by name (``source_closures.describe``).
_described: dict[str, dict[str, Any]] = {}
#: Callables named by identity, by their definition's name: the n-th is ``name~n``.
_instances: dict[str, list[Source]] = {}
#: Why a main script's function could not be described by value, by name.
_not_by_value: dict[str, str] = {}
_lock = threading.Lock()


def source_name(source: Source) -> str:
    """How a spec names a callable: ``"module:qualified.name"`` for a module's own
    function; ``"module:qualified.name@digest"`` for a closure or lambda over plain data
    (the digest of its code and values: the same definition gives the same name in every
    process, other values another name); ``"module:qualified.name~n"`` for any other
    callable (a closure over an object, a bound method, a callable object): the n-th such
    object of that name in this process, so that each is kept as itself."""
    return _name_and_description(source)[0]


def _name_and_description(source: Source) -> tuple[str, dict[str, Any] | None]:
    module = getattr(source, "__module__", None)
    name = getattr(source, "__qualname__", None) or getattr(source, "__name__", None)
    if not module or not name:
        raise InvalidArgument(f"external_source: argument 'source': {source!r} has no module "
                              "and name to be named by")
    base = f"{module}:{name}"
    if closures.is_named(source, module, name):
        return base, None
    try:
        held = closures.describe(source)
    except closures.NotPortable:
        with _lock:
            same = _instances.setdefault(base, [])
            index = next((i for i, s in enumerate(same) if _same(s, source)), None)
            if index is None:
                same.append(source)
                index = len(same) - 1
        return f"{base}~{index + 1}", None
    digest = hashlib.sha256(closures.digest_input(source, held)).hexdigest()[:16]
    return f"{base}@{digest}", held


def _same(a: Source, b: Source) -> bool:
    """Whether ``a`` and ``b`` are one callable: the same object, or the same method of the
    same object (``obj.method`` makes a new bound method each time it is read)."""
    if a is b:
        return True
    return (isinstance(a, types.MethodType) and isinstance(b, types.MethodType)
            and a.__self__ is b.__self__ and a.__func__ is b.__func__)


def definition(name: str) -> str:
    """``name`` without the suffix that tells apart objects of one definition (``~n``):
    what a fingerprint and a checkpoint's state compare."""
    base, sep, index = name.rpartition("~")
    return base if sep and index.isdigit() else name


def remember(source: Source) -> str:
    """Name ``source`` and keep it for in-process pipelines; returns its name. A function of
    the main script is also described by value (``source_closures.by_value``), so that
    this process's workers started with ``"spawn"`` rebuild it; its name is as before."""
    name, held = _name_and_description(source)
    if getattr(source, "__module__", None) == "__main__":
        try:
            held = closures.by_value(source, held or closures.describe(source))
        except closures.NotPortable as exc:
            with _lock:
                _not_by_value[name] = str(exc)
    with _lock:
        _local[name] = source
        if held is not None:
            _described[name] = held
    return name


def not_by_value(name: str) -> str | None:
    """Why the main script's function remembered as ``name`` has no description by value
    (None if it has one, or is not the main script's)."""
    with _lock:
        return _not_by_value.get(name)


def remembered(name: str) -> Source | None:
    """The callable ``fn.external_source`` was last given under ``name`` in this process."""
    with _lock:
        return _local.get(name)


def described(name: str) -> dict[str, Any] | None:
    """The description worker processes rebuild the closure remembered as ``name`` from
    (``source_closures.rebuild``); None for a module's own function (imported by name)."""
    with _lock:
        return _described.get(name)


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
    name (a module's own function) or rebuilds it from its module's code and the JSON of its
    values (a closure or lambda over plain data: ``source_closures``); InvalidArgument
    saying why and what to do for anything else (a closure over an object, a bound method,
    a callable object)."""
    where = "external_source: argument 'source' (parallel=True)"
    module = getattr(source, "__module__", None)
    qualname = getattr(source, "__qualname__", None)
    if not module or not qualname:
        raise InvalidArgument(f"{where}: {source!r} has no module and name, so worker "
                              "processes cannot import it: give a function defined in a "
                              "module (DALI requires picklable callables too)")
    name = f"{module}:{qualname}"
    if closures.is_named(source, module, qualname):
        return name
    try:
        closures.describe(source)
    except closures.NotPortable as exc:
        raise InvalidArgument(
            f"{where}: {name!r} {exc}: worker processes import the source's module and "
            "rebuild it without pickling, so give a function defined in a module, or one "
            f"made by a factory whose variables are {closures.PLAIN_DATA}; or use "
            "parallel=False") from None
    return source_name(source)
