"""``external_source`` as a source stage: a callable asked for each batch by its position.

The callable is DALI's checkpointable kind. With ``batch=False`` it is called once per
sample with ``SampleInfo(idx_in_epoch, idx_in_batch, iteration, epoch_idx)`` and returns
that sample (a tuple of ``num_outputs`` when given); with ``batch=True`` once per batch
with ``BatchInfo(iteration, epoch_idx)`` (``batch_info=True``) or the iteration, and
returns the batch: a list of ``batch_size`` arrays or one array whose first dimension is
the batch (a tuple of those with ``num_outputs``). It must be a pure function of its
argument, as DALI's checkpointing assumes: the position is all a checkpoint keeps.

**Epochs.** ``StopIteration`` ends the epoch, as in DALI; a batch cut short is dropped.
The stage goes on: the batch that met it is the next epoch's first (the source is asked
again with ``epoch_idx + 1`` and iteration 0), marked ``epoch_crossed`` so that the
in-process pipeline can raise DALI's StopIteration before it (``external_source_epochs.py``
follows the marks through the batches computed ahead); a stream does not stop.
An epoch's length is learned when the source stops it and kept (per epoch), so positions
already produced map to (epoch, iteration) without a call. ``StopIteration`` is taken as
final within an epoch (once a position stops, every later one of that epoch does).

State: (source, epoch, iteration) of the next batch asked for. Restore is O(1): the stage
starts there. A position beyond those produced (a trainer's count ahead of its last
checkpoint) is found without replay: one call at the batch before it tells whether the
epoch reaches it; where it does not, a binary search over the iterations finds the
epoch's end (O(log n) calls, per epoch ended on the way). Values are computed on the
submitting thread, in batch order; an error becomes the batch's error (DATA_LOSS naming
the source) when that batch is consumed, never earlier.

``parallel=True``: the calls are made in the pipeline's worker processes
(``parallel_calls.py``, ``source_pool.py``) and their results checked there by the same
rule (``source_results.py``); the stage reads the replies in sample order, so its batches,
epoch ends, errors and states are the serial stage's.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from conveyor.definition import external_source as names
from conveyor.definition.external_source import BatchInfo, SampleInfo, Source
from conveyor.errors import CorruptCheckpoint, ExternalSourceError, SpecError
from conveyor.v1 import checkpoint_pb2, pipeline_pb2
from conveyor_server.engine.ops.probes.probe_set import source_probe
from conveyor_server.engine.stages import MAX_SAMPLES
from conveyor_server.engine.stages.parallel_calls import ParallelCalls
from conveyor_server.engine.stages.source_callables import ExternalSources
from conveyor_server.engine.stages.source_pool import SourcePool
from conveyor_server.engine.stages.source_results import BadResult, SourceShape

OP = "external_source"


class _EpochEnd(Exception):
    """The source raised StopIteration for this position."""


@dataclass(frozen=True)
class SourceSample:
    """One sample's outputs, or the error its batch ends with, and where it came from."""

    outputs: tuple[np.ndarray, ...]
    where: str
    error: ExternalSourceError | None = None

    def get(self) -> tuple[np.ndarray, ...]:
        if self.error is not None:
            raise self.error
        return self.outputs


def _per_output(op_index: int, name: str, values: Sequence[Any] | None,
                count: int) -> list[Any]:
    """An argument given once or once per output, as one entry per output (None: not
    given)."""
    if not values:
        return [None] * count
    if len(values) == 1:
        return list(values) * count
    if len(values) != count:
        raise SpecError(OP, name, f"has {len(values)} entries for {count} outputs (give one, "
                                  "or one per output)")
    return list(values)


class ExternalSourceStage:
    op_type = OP

    def __init__(self, op_index: int, name: str, source: Source, args: Mapping[str, Any], *,
                 batch_size: int) -> None:
        self.op_index = op_index
        self.name = name
        self.batch_size = batch_size
        self._source = source
        self._batch = self.calls_batches = bool(args["batch"])
        self._batch_info = self.batch_info = bool(args["batch_info"])
        self._tupled = args["num_outputs"] > 0
        self.num_outputs = max(1, args["num_outputs"])
        self._dtypes = [np.dtype(d) if d else None for d in
                        _per_output(op_index, "dtype", args["dtype"], self.num_outputs)]
        ndims = _per_output(op_index, "ndim", args["ndim"], self.num_outputs)
        self.layouts = [lay or "" for lay in
                        _per_output(op_index, "layout", args["layout"], self.num_outputs)]
        for o, (layout, ndim) in enumerate(zip(self.layouts, ndims, strict=True)):
            if layout and ndim is not None and len(layout) != ndim:
                raise SpecError(OP, "layout", f"output {o}: layout {layout!r} has "
                                              f"{len(layout)} dimensions, ndim is {ndim}")
        #: What the source's results must be (the number of dimensions of each output's
        #: samples where ndim or layout say).
        self.shape = SourceShape(
            batch_size, self.num_outputs, self._tupled,
            tuple(d.name if d is not None else None for d in self._dtypes),
            tuple(ndim if ndim is not None else (len(layout) if layout else None)
                  for ndim, layout in zip(ndims, self.layouts, strict=True)))
        #: Whether the source runs in worker processes; ``parallel`` set by the plan.
        self.wants_parallel = bool(args.get("parallel", False))
        self.prefetch = int(args.get("prefetch_queue_depth", 1))
        self.parallel: ParallelCalls | None = None
        self._lock = threading.Lock()
        #: Batches of each epoch, learned where the source stopped it.
        self._lengths: dict[int, int] = {}
        #: Batches of each epoch known to exist (the source returned them).
        self._complete: dict[int, int] = {}
        self._epoch = 0
        self._iteration = 0
        #: Whether the batch ``next()`` last gave is the first of an epoch that the
        #: source's StopIteration opened (the position before it was the end of the one
        #: before): a function of the position alone.
        self.epoch_crossed = False

    @property
    def label(self) -> str:
        return f"external_source (op {self.op_index}) {self.name!r}"

    # -- the stage contract --------------------------------------------------------------

    def reset(self, state: checkpoint_pb2.OpState | None) -> None:
        with self._lock:
            self._epoch, self._iteration = (0, 0) if state is None else self._position(state)
            if self.parallel is not None:
                self.parallel.drop()

    def get_state(self) -> checkpoint_pb2.OpState:
        with self._lock:
            return self._state(self._epoch, self._iteration)

    def advanced(self, state: checkpoint_pb2.OpState, samples: int) -> checkpoint_pb2.OpState:
        epoch, iteration = self._position(state)
        with self._lock:
            return self._state(*self._advance(epoch, iteration, samples // self.batch_size))

    def next(self) -> list[SourceSample]:
        with self._lock:
            epoch, iteration = self._epoch, self._iteration
            self.epoch_crossed = False
            try:
                try:
                    samples = self._produce(epoch, iteration)
                except _EpochEnd:
                    self.epoch_crossed = True
                    self._ended(epoch, iteration)
                    if self.parallel is not None:
                        self.parallel.drop()
                    epoch, iteration = epoch + 1, 0
                    try:
                        samples = self._produce(epoch, iteration)
                    except _EpochEnd:
                        self._ended(epoch, iteration)
                        raise AssertionError("unreachable: an empty epoch raises") from None
                self._complete[epoch] = max(self._complete.get(epoch, 0), iteration + 1)
            except ExternalSourceError as exc:
                where = f"{self.name} (epoch {epoch}, iteration {iteration})"
                samples = [SourceSample((), where, exc)] * self.batch_size
            self._epoch, self._iteration = epoch, iteration + 1
            return samples

    def past_epoch_end(self, state: checkpoint_pb2.OpState) -> checkpoint_pb2.OpState:
        """``state``, moved to the next epoch's start where it stands at the end of an
        epoch whose StopIteration was met (DALI's position once ``run()`` raised it)."""
        epoch, iteration = self._position(state)
        with self._lock:
            if (iteration > 0 and epoch not in self._lengths
                    and self._complete.get(epoch, 0) <= iteration
                    and not self._exists(epoch, iteration)):
                # This engine did not produce the batch that met the StopIteration (a
                # fan-in's holder: its workers computed the epoch): one call finds it out.
                self._ended(epoch, iteration)
            if iteration > 0 and self._lengths.get(epoch) == iteration:
                return self._state(epoch + 1, 0)
        return state

    # -- positions -----------------------------------------------------------------------

    def _state(self, epoch: int, iteration: int) -> checkpoint_pb2.OpState:
        return checkpoint_pb2.OpState(op=self.op_index, external_source=(
            checkpoint_pb2.ExternalSourceState(source=self.name, epoch=epoch,
                                               iteration=iteration)))

    def _position(self, state: checkpoint_pb2.OpState) -> tuple[int, int]:
        kind = state.WhichOneof("state")
        if kind != "external_source":
            raise CorruptCheckpoint(f"{self.label}: checkpoint holds a {kind} state, expected "
                                    "an external source's")
        held = state.external_source
        if names.definition(held.source) != names.definition(self.name):
            raise CorruptCheckpoint(f"{self.label}: checkpoint's state is of source "
                                    f"{held.source!r}")
        if held.iteration * self.batch_size > MAX_SAMPLES or held.epoch > MAX_SAMPLES:
            raise CorruptCheckpoint(f"{self.label}: position (epoch {held.epoch}, iteration "
                                    f"{held.iteration}) is beyond the furthest a pipeline "
                                    "reaches")
        return held.epoch, held.iteration

    def _advance(self, epoch: int, iteration: int, batches: int) -> tuple[int, int]:
        """The position ``batches`` batches after (epoch, iteration). An epoch that ends on
        a batch stays at its end (iteration == length); the next batch moves on."""
        while batches > 0:
            length = self._lengths.get(epoch)
            if length is None:
                last = iteration + batches - 1
                if self._complete.get(epoch, 0) > last or self._exists(epoch, last):
                    return epoch, iteration + batches
                length = self._find_end(epoch, max(iteration, self._complete.get(epoch, 0)),
                                        last)
            if iteration > length:
                raise ExternalSourceError(
                    f"{self.label}: epoch {epoch} has {length} batches, but the position is "
                    f"iteration {iteration}: the source is not the one the checkpoint was "
                    "made with", source=self.name)
            if iteration + batches <= length:
                return epoch, iteration + batches
            batches -= length - iteration
            epoch, iteration = epoch + 1, 0
        return epoch, iteration

    def _exists(self, epoch: int, iteration: int) -> bool:
        """Whether the source gives the whole batch ``iteration`` of ``epoch``: one call
        (its last sample, with ``batch=False``)."""
        try:
            if self.parallel is not None:
                self._outcome(self.parallel.probe(epoch, iteration), epoch, iteration)
            elif self._batch:
                self._call(BatchInfo(iteration, epoch) if self._batch_info else iteration,
                           epoch, iteration)
            else:
                last = self.batch_size - 1
                self._call(SampleInfo(iteration * self.batch_size + last, last, iteration,
                                      epoch), epoch, iteration)
        except _EpochEnd:
            return False
        self._complete[epoch] = max(self._complete.get(epoch, 0), iteration + 1)
        return True

    def _find_end(self, epoch: int, lo: int, hi: int) -> int:
        """The epoch's length, knowing batches before ``lo`` exist and ``hi`` does not."""
        while lo < hi:
            mid = (lo + hi) // 2
            if self._exists(epoch, mid):
                lo = mid + 1
            else:
                hi = mid
        self._ended(epoch, lo)
        return lo

    def _ended(self, epoch: int, length: int) -> None:
        if length == 0:
            raise ExternalSourceError(f"{self.label}: epoch {epoch} is empty (StopIteration "
                                      "at its first batch)", source=self.name)
        self._lengths[epoch] = length

    # -- calling the source --------------------------------------------------------------

    def _call(self, argument: Any, epoch: int, iteration: int) -> Any:
        try:
            return self._source(argument)
        except StopIteration:
            raise _EpochEnd from None
        except Exception as exc:
            raise ExternalSourceError(
                f"{self.label} raised {type(exc).__name__} at epoch {epoch}, iteration "
                f"{iteration}: {exc}", source=self.name) from exc

    def _produce(self, epoch: int, iteration: int) -> list[SourceSample]:
        size = self.batch_size
        where = f"{self.name} (epoch {epoch}, iteration {iteration})"
        try:
            if self.parallel is not None:
                replies = self.parallel.batch(epoch, iteration, self._lengths.get(epoch))
                for reply in replies:
                    self._outcome(reply.header, epoch, iteration)
                arrays = [a for reply in replies for a in reply.arrays]
                n = self.num_outputs
                samples = [tuple(arrays[i * n:(i + 1) * n]) for i in range(size)]
            elif self._batch:
                info = BatchInfo(iteration, epoch) if self._batch_info else iteration
                samples = self.shape.batch(self._call(info, epoch, iteration))
            else:
                samples = [self.shape.sample(self._call(
                    SampleInfo(iteration * size + i, i, iteration, epoch), epoch, iteration))
                    for i in range(size)]
        except BadResult as bad:
            raise self._bad(epoch, iteration, bad.what) from None
        return [SourceSample(outputs, f"{where} sample {i}")
                for i, outputs in enumerate(samples)]

    def _outcome(self, header: Mapping[str, Any], epoch: int, iteration: int) -> None:
        """Raise what a worker's reply says the call did, as the serial call would."""
        status = header["status"]
        if status == "stop":
            raise _EpochEnd
        if status == "bad":
            raise BadResult(header["what"])
        if status == "raised":
            raise ExternalSourceError(
                f"{self.label} raised {header['type']} at epoch {epoch}, iteration "
                f"{iteration}: {header['message']}", source=self.name)
        if status == "died":
            raise ExternalSourceError(
                f"{self.label} at epoch {epoch}, iteration {iteration}: {header['message']}"
                " (parallel=True; a source that crashes its process on a position fails "
                "there, as parallel=False would)", source=self.name)

    def _bad(self, epoch: int, iteration: int, what: str) -> ExternalSourceError:
        return ExternalSourceError(f"{self.label} at epoch {epoch}, iteration {iteration}: "
                                   f"{what}", source=self.name)


# -- behaviour probe (engine/identity/behaviour/) ------------------------------------------------


_PROBE_BATCH = 4


def _probe_samples(info: SampleInfo) -> np.ndarray:
    if info.idx_in_epoch >= 9 + 5 * info.epoch_idx:  # epochs of 9, 14, 19, ... samples
        raise StopIteration
    return np.array([info.epoch_idx, info.idx_in_epoch, info.idx_in_batch, info.iteration],
                    dtype=np.int64)


def _probe_batches(info: Any) -> tuple[np.ndarray, list[np.ndarray]]:
    iteration, epoch = (info.iteration, info.epoch_idx) if isinstance(info, BatchInfo) \
        else (int(info), -1)
    if iteration >= 2 + (epoch % 3 if epoch >= 0 else 1):
        raise StopIteration
    first = np.full((_PROBE_BATCH, 2), [epoch, iteration], dtype=np.int32)
    return first, [np.arange(i + 1, dtype=np.float32) for i in range(_PROBE_BATCH)]


def _probe_stage(batch: bool, batch_info: bool) -> ExternalSourceStage:
    args = {"batch": batch, "batch_info": batch_info, "num_outputs": 0 if not batch else 2,
            "dtype": None, "ndim": None, "layout": None}
    return ExternalSourceStage(3, "probe:source", _probe_batches if batch else _probe_samples, args,
                               batch_size=_PROBE_BATCH)


@source_probe("external_source")
def _external_source() -> list[np.ndarray]:
    out: list[np.ndarray] = []
    for batch, batch_info in ((False, False), (True, True), (True, False)):
        stage = _probe_stage(batch, batch_info)
        stage.reset(None)
        for _ in range(12):
            for sample in stage.next():
                out.extend(sample.get())
        fresh = _probe_stage(batch, batch_info)
        fresh.reset(None)
        start = fresh.get_state()
        for batches in (0, 1, 2, 3, 5, 8, 13, 21):
            state = fresh.advanced(start, batches * _PROBE_BATCH).external_source
            out.append(np.array([state.epoch, state.iteration], dtype=np.uint64))
    return out


def make_pool(spec: pipeline_pb2.PipelineSpec, stages: Sequence[ExternalSourceStage],
              sources: ExternalSources) -> SourcePool:
    """The pool of ``stages`` (the parallel sources), not started; each stage gets its
    calls. A source the workers could not import by name is refused here, saying why."""
    method = sources.start_method(spec.py_start_method or "fork")
    configs = []
    for stage in stages:
        where = f"ops[{stage.op_index}].args.source"
        held = sources.described(stage.name)
        if held is not None:
            module = held["module"]
        else:
            module, _ = names.check_name(stage.name,
                                         f"external_source: argument 'source' ({where})")
        if module == "__main__" and method != "fork" and "code" not in (held or {}):
            why = names.not_by_value(stage.name) or "it is not this process's"
            raise SpecError("external_source", "source", (
                f"{stage.name!r} ({where}) is defined in the main script, which worker "
                f"processes started with py_start_method={method!r} cannot import, and "
                f"cannot be sent to them by value: {why}; move it into a module of its own, "
                "or use py_start_method='fork' in process"))
        configs.append({"name": stage.name, "closure": held, "batch": stage.calls_batches,
                        "batch_info": stage.batch_info, "shape": stage.shape.as_json()})
    pool = SourcePool(configs, spec.py_num_workers or 1, method)
    for index, stage in enumerate(stages):
        stage.parallel = ParallelCalls(pool, index, stage.name, batch=stage.calls_batches,
                                       batch_size=spec.batch_size, depth=stage.prefetch)
    return pool
