"""The registry of operators, and the contract every operator follows.

This module holds the contract and the map of builders only: an operator's module
registers its builders when it is imported, and ``engine/catalog.py`` imports every
operator module (``catalog.load()``, which the plan and the behaviour measurement call
first). What an operator takes (its arguments, devices, output sizes) is declared once, in
its schema (``conveyor.definition.schemas.registry``); the builders registered here must serve
each declared device (a test checks it).

An operator is registered by a builder, per sample (the default) or per batch::

    @register("rotate")
    def build_rotate(ctx: OpContext) -> SampleOp: ...

    @register("crop_mirror_normalize", per=BATCH)
    def build_crop_mirror_normalize_batch(ctx: OpContext) -> BatchOp: ...

The builder runs once when a pipeline is built: it reads ``ctx.args`` (constants with
defaults filled in, see ``conveyor.definition.schemas.registry``), raises ``SpecError`` for bad
combinations, and returns what runs:

- a ``SampleOp``, whose ``fn(inputs, targs)`` maps one sample's input arrays and
  per-sample argument arrays (``targs``, from ``arg_inputs`` such as ``angle=angles``) to a
  tuple of output arrays. The engine runs it on its worker threads, one sample at a time.
- a ``BatchOp``, whose ``fn(inputs, targs)`` gets, for each input, the whole batch (the
  samples in order: a list of arrays whose shapes may differ, or a device batch) and, for
  each argument input, the samples' values in order; it returns one batch per output (a
  sequence of per-sample arrays, such as one preallocated array whose first axis is the
  sample). The engine runs it once per batch, at a barrier after the samples' earlier steps.
  An error about one sample is raised as ``SampleFailed(index, error)``.

Either declares the device it computes on. A builder serves the spec devices it is
registered for (``devices``, "cpu" unless told): ``@register("decoders.image", per=BATCH,
devices=("mixed", "gpu"))`` is the form a ``device="mixed"`` decoder is built in, while
the CPU decoder stays per sample. A ``BatchOp`` on a GPU takes and returns device batches:
a list of CuPy arrays, HWC, one per sample, on the pipeline's ``device_id``, enqueued on
the device's compute stream (``engine/device/streams.py``; ``engine/gpu_staging.py`` copies
them out). ``fn`` must be
pure: same inputs, same outputs, on any thread. Operators that keep state are not
registered here: they are source stages (see ``conveyor_server.engine.stages``); their
values reach the operators through ``targs``, keyed by global sample index, so a batched
operator sees the same values as the per-sample one. An operator whose random draws depend
on its input (a crop window drawn for the image's size) declares ``keyed=True``: the
engine then passes each sample's global index in ``targs[SAMPLE_INDEX]``, and the operator
keys its draws by (``ctx.seed``, its index, that sample index, draw), so it stays a pure
function with nothing to checkpoint. Where an operator has both forms, the engine picks
one (``Pipeline(batch_ops=...)``); both must give the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal

import numpy as np

from conveyor.definition.schemas.registry import SCHEMAS
from conveyor_server.engine.admission.limits import NO_LIMITS, EngineLimits

SAMPLE: Final = "sample"
BATCH: Final = "batch"
Per = Literal["sample", "batch"]
Device = Literal["cpu", "gpu"]
#: The ``targs`` key of a sample's global index, for operators declared ``keyed``.
SAMPLE_INDEX: Final = "@sample_index"

SampleFn = Callable[[Sequence[np.ndarray], Mapping[str, np.ndarray]], tuple[np.ndarray, ...]]
#: One input's or output's batch: the samples in order (a list of arrays, or one array
#: whose first axis is the sample), or a device batch.
SampleBatch = Any
BatchFn = Callable[[Sequence[SampleBatch], Mapping[str, SampleBatch]], tuple[SampleBatch, ...]]


@dataclass(frozen=True)
class OpContext:
    op_type: str
    #: Position of the operator in ``PipelineSpec.ops``.
    index: int
    #: Constant arguments, defaults filled in
    #: (``conveyor.definition.schemas.registry.decode_args``).
    args: Mapping[str, Any]
    #: Names of arguments fed per sample by another operator's output.
    tensor_args: frozenset[str]
    device: str
    #: Layouts of the positional inputs ("HWC", "" when unknown).
    input_layouts: tuple[str, ...] = ()
    #: The server's limits (decoders check image sizes against them).
    limits: EngineLimits = NO_LIMITS
    #: The seed its keyed draws use: its ``seed`` argument, else the pipeline's.
    seed: int = 0
    #: The pipeline's CUDA device ordinal (``PipelineSpec.device_id``); -1: none named,
    #: the current device (0 unless the process chose another).
    device_id: int = -1
    #: The pipeline's batch size (0 where no pipeline is at hand, as for a probe).
    batch_size: int = 0
    #: Finds the Python callable a ``python_function`` names: (name, op index, operator,
    #: argument) to the callable, refusing one a server does not register; None: in
    #: process, any (``engine/stages/source_callables.py``).
    callables: Callable[[str, int, str, str], Callable[..., Any]] | None = None


@dataclass(frozen=True)
class SampleOp:
    fn: SampleFn
    #: Layout of each output ("HWC", "CHW", or "" for none).
    layouts: tuple[str, ...]
    device: Device = "cpu"
    #: Draws keyed random numbers: gets the sample's global index in ``targs[SAMPLE_INDEX]``.
    keyed: bool = False
    per: ClassVar[Per] = SAMPLE


@dataclass(frozen=True)
class BatchOp:
    fn: BatchFn
    layouts: tuple[str, ...]
    device: Device = "cpu"
    #: Draws keyed random numbers: gets the samples' global indices in
    #: ``targs[SAMPLE_INDEX]``.
    keyed: bool = False
    per: ClassVar[Per] = BATCH


BuiltOp = SampleOp | BatchOp


class SampleFailed(Exception):
    """Raised by a batched operator when sample ``index`` of the batch is at fault: the
    engine then reports ``error`` naming that sample's data file, as for a per-sample
    operator."""

    def __init__(self, index: int, error: Exception) -> None:
        super().__init__(index, error)
        self.index = index
        self.error = error
Builder = Callable[[OpContext], BuiltOp]

#: The CPU builders, by (operator, form); builders for other devices by (operator, form,
#: spec device).
_BUILDERS: dict[tuple[str, Per], Builder] = {}
_DEVICE_BUILDERS: dict[tuple[str, Per, str], Builder] = {}
CPU_ONLY: Final = ("cpu",)


def register(op_type: str, per: Per = SAMPLE,
             devices: Sequence[str] = CPU_ONLY) -> Callable[[Builder], Builder]:
    declared = SCHEMAS.get(op_type)
    undeclared = [d for d in devices if declared is None or d not in declared.devices]
    if undeclared:
        raise ValueError(f"operator {op_type!r} is not declared for device(s) {undeclared} "
                         "(declare it in conveyor.definition.schemas.registry first)")

    def add(builder: Builder) -> Builder:
        for device in devices:
            table: dict[Any, Builder] = _BUILDERS if device == "cpu" else _DEVICE_BUILDERS
            key = (op_type, per) if device == "cpu" else (op_type, per, device)
            if key in table:
                raise ValueError(f"operator {op_type!r} is already registered per {per} on "
                                 f"{device}")
            table[key] = builder
        return builder

    return add


def _lookup(op_type: str, per: Per, device: str) -> Builder | None:
    if device in ("", "cpu"):
        return _BUILDERS.get((op_type, per))
    return _DEVICE_BUILDERS.get((op_type, per, device))


def builder_for(op_type: str, per: Per = SAMPLE, device: str = "cpu") -> Builder:
    builder = _lookup(op_type, per, device)
    if builder is None:
        on = "" if device in ("", "cpu") else f" on {device}"
        raise KeyError(f"no per-{per} operator {op_type!r} is registered{on}")
    return builder


def forms(op_type: str, device: str = "cpu") -> tuple[Per, ...]:
    """The forms ``op_type`` is registered in on ``device`` (per sample, per batch), in
    that order."""
    return tuple(per for per in (SAMPLE, BATCH) if _lookup(op_type, per, device) is not None)


def build(ctx: OpContext, per: Per) -> BuiltOp:
    """Build ``ctx``'s operator in the form ``per``; the builder must return that form."""
    built = builder_for(ctx.op_type, per, ctx.device)(ctx)
    if built.per != per:
        raise TypeError(f"the per-{per} builder of {ctx.op_type!r} returned a per-{built.per} "
                        "operator")
    return built


def registered() -> list[str]:
    """The operators with a CPU builder."""
    return sorted({op_type for op_type, _ in _BUILDERS})


def registrations() -> list[tuple[str, Per, str]]:
    """Every builder registered: (operator, form, spec device)."""
    return sorted([(op_type, per, "cpu") for op_type, per in _BUILDERS]
                  + list(_DEVICE_BUILDERS))
