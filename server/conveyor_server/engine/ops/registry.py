"""The registry of per-sample operators.

A per-sample operator is registered by a builder::

    @register("rotate")
    def build_rotate(ctx: OpContext) -> BuiltOp: ...

The builder runs once when a pipeline is built: it reads ``ctx.args`` (constants with
defaults filled in, see ``conveyor.schema``), raises ``SpecError`` for bad combinations,
and returns a ``BuiltOp`` whose ``fn(inputs, targs)`` maps one sample's input arrays and
per-sample argument arrays (``targs``, from ``arg_inputs`` such as ``angle=angles``) to a
tuple of output arrays. ``fn`` must be pure: same inputs, same outputs, on any thread.
Operators that draw random numbers or keep state are not registered here: they are
source stages (see ``conveyor_server.engine.stages``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from conveyor_server.engine.limits import NO_LIMITS, EngineLimits

SampleFn = Callable[[Sequence[np.ndarray], Mapping[str, np.ndarray]], tuple[np.ndarray, ...]]


@dataclass(frozen=True)
class OpContext:
    op_type: str
    #: Position of the operator in ``PipelineSpec.ops``.
    index: int
    #: Constant arguments, defaults filled in (``conveyor.schema.decode_args``).
    args: Mapping[str, Any]
    #: Names of arguments fed per sample by another operator's output.
    tensor_args: frozenset[str]
    device: str
    #: Layouts of the positional inputs ("HWC", "" when unknown).
    input_layouts: tuple[str, ...] = ()
    #: The server's limits (decoders check image sizes against them).
    limits: EngineLimits = NO_LIMITS


@dataclass(frozen=True)
class BuiltOp:
    fn: SampleFn
    #: Layout of each output ("HWC", "CHW", or "" for none).
    layouts: tuple[str, ...]


Builder = Callable[[OpContext], BuiltOp]

_BUILDERS: dict[str, Builder] = {}


def register(op_type: str) -> Callable[[Builder], Builder]:
    def add(builder: Builder) -> Builder:
        if op_type in _BUILDERS:
            raise ValueError(f"operator {op_type!r} is already registered")
        _BUILDERS[op_type] = builder
        return builder

    return add


def builder_for(op_type: str) -> Builder:
    _load_builtin_ops()
    try:
        return _BUILDERS[op_type]
    except KeyError:
        raise KeyError(f"no per-sample operator {op_type!r} is registered") from None


def registered() -> list[str]:
    _load_builtin_ops()
    return sorted(_BUILDERS)


def _load_builtin_ops() -> None:
    # Importing the modules registers their operators.
    from conveyor_server.engine.ops import crop, decode, normalize, resize, rotate  # noqa: F401
