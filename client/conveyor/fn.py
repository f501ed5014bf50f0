"""Operators, spelled as DALI's ``fn`` module: ``fn.readers.file``, ``fn.rotate``, ...

Each call records one operator in the pipeline being defined and returns its outputs as
``DataNode``s. Constant arguments are validated against
``conveyor.definition.schemas.registry`` at once. Every operator of
``conveyor.definition.schemas.registry.SCHEMAS`` is here, made from its schema: ``rotate`` as
``fn.rotate``, ``readers.file`` as ``fn.readers.file`` (a namespace per prefix), and
under each of its ``aliases`` (``fn.experimental.equalize`` is ``fn.equalize``);
``external_source`` and ``python_function`` are wrapped to take a callable,
``readers.tfrecord`` to take DALI's ``features`` dict (``conveyor.definition.tfrecord``) and return
its outputs by feature name.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from conveyor.definition import expressions
from conveyor.definition import external_source as sources
from conveyor.definition.graph import make_op
from conveyor.definition.schemas.registry import SCHEMAS
from conveyor.definition.tfrecord import encode_features
from conveyor.definition.unsupported import unknown_operator
from conveyor.errors import SpecError


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
    (``conveyor.definition.expressions``)."""
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
_python_function = _OPS.pop("python_function")
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
    names = {"external_source", "python_function"}
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


def python_function(*inputs: Any, function: Any = None, num_outputs: int = 1,
                    **kwargs: Any) -> Any:
    """DALI's ``fn.python_function``: ``function`` is a callable or its
    ``"module:function"`` name, run on each sample's inputs (``batch_processing=True``: on
    lists of the batch's samples). A spec carries the name only: a server runs the
    functions its configuration lists (``external_sources``); an in-process ``Pipeline``
    runs the callable given here. Keeping it pure is the caller's part: its name stands for
    its behaviour."""
    if function is None:
        raise SpecError("python_function", "function", "is required: a callable, or its "
                        "'module:function' name")
    if callable(function):
        name = sources.remember(function)
    else:
        name = function
        if isinstance(name, str):
            sources.check_name(name, "python_function: argument 'function'")
    return _python_function(*inputs, function=name, num_outputs=num_outputs, **kwargs)


def external_source(source: Any = None, num_outputs: int | None = None, **kwargs: Any) -> Any:
    """DALI's ``fn.external_source`` for a checkpointable source: ``source`` is a callable
    taking ``SampleInfo`` (``batch=False``) or ``BatchInfo`` / the iteration (``batch=True``),
    or its ``"module:function"`` name. A spec carries the name only: a server calls the
    callables its configuration lists; an in-process ``Pipeline`` calls the callable given
    here. With ``num_outputs`` the callable returns a tuple and so does this. With
    ``parallel=True`` worker processes import it by name, or rebuild a closure or lambda
    over plain data; a closure over an object, a bound method or a callable object is
    refused here. So is a source DALI takes but cannot checkpoint (a list or other
    iterable, an iterator, a generator or generator function, a callable taking no
    argument): a checkpoint keeps only the position, so the source must be a function of
    it; a callable's signature is checked here, not at the first batch."""
    if source is None:
        raise SpecError("external_source", "source", "is required: a callable taking "
                        "SampleInfo or BatchInfo, or its 'module:function' name")
    _check_checkpointable(source)
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


_ACCEPTED = ("a callable of the position (one argument: SampleInfo with batch=False; "
             "BatchInfo with batch_info=True or the iteration number with batch=True) or its "
             "'module:function' name")


def _check_checkpointable(source: Any) -> None:
    """Refuse, at definition, a source whose data cannot be found again from a position."""
    why = ("a checkpoint keeps only the position (epoch, iteration), so the source must give "
           "the same data again from it")
    if isinstance(source, str):
        return
    if not callable(source) or inspect.isgeneratorfunction(source):
        kind = ("a generator function" if callable(source) else
                "an iterator" if hasattr(source, "__next__") else
                "an iterable" if hasattr(source, "__iter__") else type(source).__name__)
        raise SpecError("external_source", "source",
                        f"got {kind} ({type(source).__name__}), which cannot be checkpointed: "
                        f"{why}. Give {_ACCEPTED}, returning the data for that position and "
                        "raising StopIteration where the epoch ends")
    try:
        signature = inspect.signature(source)
    except (TypeError, ValueError):
        return  # a builtin without a signature: called with one argument, as DALI's
    params = list(signature.parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    varargs = any(p.kind is p.VAR_POSITIONAL for p in params)
    if len(required) > 1 or not (positional or varargs):
        takes = f"{len(required)} required arguments" if required else "no argument"
        raise SpecError("external_source", "source",
                        f"{getattr(source, '__qualname__', source)!r} takes {takes}: it "
                        f"cannot be checkpointed ({why}). Give {_ACCEPTED}")
