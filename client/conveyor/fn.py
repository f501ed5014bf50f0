"""Operators, spelled as DALI's ``fn`` module: ``fn.readers.file``, ``fn.rotate``, ...

Each call records one operator in the pipeline being defined and returns its outputs as
``DataNode``s. Constant arguments are validated against ``conveyor.schema`` at once. Every
operator of ``conveyor.schema.SCHEMAS`` is here, made from its schema: ``rotate`` as
``fn.rotate``, ``readers.file`` as ``fn.readers.file`` (a namespace per prefix), and
under each of its ``aliases`` (``fn.experimental.equalize`` is ``fn.equalize``);
``external_source`` is wrapped to take a callable, ``readers.tfrecord`` to take DALI's
``features`` dict (``conveyor.tfrecord``) and return its outputs by feature name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conveyor import expressions
from conveyor import external_source as sources
from conveyor.errors import SpecError
from conveyor.graph import make_op
from conveyor.schema import SCHEMAS
from conveyor.tfrecord import encode_features
from conveyor.unsupported import unknown_operator


class Namespace:
    """The operators of one prefix (``fn.readers``, ``fn.random``, ``fn.math``): each an
    attribute; any other name raises ``NotSupported`` (an ``AttributeError``: ``hasattr``
    is False), naming the close operators."""

    def __init__(self, prefix: str, ops: dict[str, Callable[..., Any]]) -> None:
        self.__dict__.update(ops)
        self.__dict__["_Namespace__prefix"] = prefix

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(f"fn.{self.__prefix} has no attribute {name!r}")
        raise unknown_operator(f"{self.__prefix}.{name}", _NAMES)

    def __dir__(self) -> list[str]:
        return sorted(k for k in self.__dict__ if not k.startswith("_"))

    def __repr__(self) -> str:
        return f"<conveyor fn.{self.__prefix}: {', '.join(self.__dir__())}>"


def _declared_ops() -> dict[str, Any]:
    """The top-level operators by name (aliases too), and a namespace per prefix
    (``readers``, ``experimental``); ``math`` also holds DALI's ``fn.math`` functions
    (``conveyor.expressions``)."""
    made = {op_type: make_op(op_type) for op_type in SCHEMAS}
    made.update({alias: made[op_type] for op_type, declared in SCHEMAS.items()
                 for alias in declared.aliases})
    top: dict[str, Any] = {}
    grouped: dict[str, dict[str, Callable[..., Any]]] = {"math": {}}
    for op_type, op in made.items():
        prefix, dot, name = op_type.rpartition(".")
        if dot:
            grouped.setdefault(prefix, {})[name] = op
        else:
            top[op_type] = op
    grouped["math"].update(expressions.math_functions())
    return {**top, **{prefix: Namespace(prefix, ops) for prefix, ops in grouped.items()}}


_OPS = _declared_ops()
_external_source = _OPS.pop("external_source")
_tfrecord = _OPS["readers"].tfrecord


def _readers_tfrecord(*inputs: Any, features: Any = None, **kwargs: Any) -> dict[str, Any]:
    """DALI's ``fn.readers.tfrecord``: ``features`` maps each feature's name to
    ``tfrecord.FixedLenFeature(...)`` or ``tfrecord.VarLenFeature(...)``; the outputs come
    back as a dict by feature name, in ``features``' order."""
    encoded = encode_features(features)
    out = _tfrecord(*inputs, features=encoded, **kwargs)
    nodes = out if isinstance(out, tuple) else (out,)
    return dict(zip(features, nodes, strict=True))


_readers_tfrecord.__name__ = "tfrecord"
_readers_tfrecord.__qualname__ = "fn.readers.tfrecord"
_OPS["readers"].tfrecord = _readers_tfrecord


def _full_names() -> list[str]:
    """Every name ``fn`` holds, in full (``rotate``, ``readers.file``, ``math.sqrt``)."""
    names = {"external_source"}
    for key, value in _OPS.items():
        if isinstance(value, Namespace):
            names.update(f"{key}.{name}" for name in dir(value))
        else:
            names.add(key)
    return sorted(names)


_NAMES = _full_names()


def __getattr__(name: str) -> Any:
    """``fn.rotate``, ``fn.readers``: the operators the schemas declare; any other name
    raises ``NotSupported`` (an ``AttributeError``), naming the close operators."""
    try:
        return _OPS[name]
    except KeyError:
        if name.startswith("_"):
            raise AttributeError(f"module 'conveyor.fn' has no attribute {name!r}") from None
        raise unknown_operator(name, _NAMES) from None


def __dir__() -> list[str]:
    return sorted([*globals(), *_OPS])


def external_source(source: Any = None, num_outputs: int | None = None, **kwargs: Any) -> Any:
    """DALI's ``fn.external_source`` for a checkpointable source: ``source`` is a callable
    taking ``SampleInfo`` (``batch=False``) or ``BatchInfo`` / the iteration (``batch=True``),
    or its ``"module:function"`` name. A spec carries the name only: a server calls the
    callables its configuration lists; an in-process ``Pipeline`` calls the callable given
    here. With ``num_outputs`` the callable returns a tuple and so does this. With
    ``parallel=True`` worker processes import it by name, or rebuild a closure or lambda
    over plain data; a closure over an object, a bound method or a callable object is
    refused here."""
    if source is None:
        raise SpecError("external_source", "source", "is required: a callable taking "
                        "SampleInfo or BatchInfo, or its 'module:function' name")
    if "cycle" in kwargs:
        raise SpecError("external_source", "cycle", "applies to iterables, which cannot be "
                        "checkpointed: give a callable that raises StopIteration instead")
    if isinstance(kwargs.get("ndim"), int) and not isinstance(kwargs["ndim"], bool):
        kwargs["ndim"] = [kwargs["ndim"]]  # one for every output, as dtype and layout
    if callable(source):  # in process it may be any callable (a lambda, a closure)
        if kwargs.get("parallel"):  # ... but worker processes import it by name
            sources.check_parallel(source)
        name = sources.remember(source)
    else:
        name = source
        if isinstance(name, str):
            sources.check_name(name)
    out = _external_source(source=name, num_outputs=num_outputs or 0, **kwargs)
    if num_outputs:
        return out if isinstance(out, tuple) else (out,)
    return out
