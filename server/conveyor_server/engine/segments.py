"""Running a plan's segments over one batch: each sample's state, file and steps.

A sample's state holds its values by (op, output) and how to name its data file, which
errors name (named only then). Where the pipeline reads local files (``readers.file``), the
first phase reads the batch's files of each such reader in one call (``data/file_batch.py``)
on a worker, with the GIL released. The next takes each sample's file (its bytes from that
read, or its error) and label and runs the first per-sample segment; each later per-sample
segment is a phase of its own; a batch segment gathers its step's inputs across the batch in
sample order, runs the step once and hands each sample its part of every output; a sample
it fails on (``SampleFailed``) is left out or replaced under the step's ``on_error``
policy, and the step runs again without it. ``BatchWork`` runs the phases on the worker
threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np

from conveyor.errors import ConveyorError, DataFileError, Internal
from conveyor_server.engine.batch_work import BatchPhase, BatchWork, Phase, SamplePhase
from conveyor_server.engine.data.file_batch import FileBatch
from conveyor_server.engine.ops.registry import BatchOp, SampleFailed, SampleOp
from conveyor_server.engine.plan import (
    SAMPLE_INDEX_REF,
    BatchSegment,
    Plan,
    Ref,
    SampleSegment,
    Step,
)

#: Each source stage's values for one batch: (op index, one value per sample).
SourceValues = Sequence[tuple[int, list[Any]]]


@dataclass
class SampleState:
    values: dict[Ref, Any] = field(default_factory=dict)
    #: How to name the data file the sample was read from, and what to name (for error
    #: messages: named only when one is made).
    origin: tuple[Callable[[Any], str], Any] | None = None
    #: Why the sample failed under a "skip" or "replace" policy, and that policy.
    failed: str = ""
    policy: str = ""
    #: The sample's place in its batch, and the batch's files read in one call, by reader
    #: op (dropped once the sample has its bytes: the batch's buffer is not kept for it).
    slot: int = 0
    files: dict[int, FileBatch] | None = None

    @property
    def where(self) -> str:
        """The data file the sample was read from, as messages name it."""
        return "" if self.origin is None else self.origin[0](self.origin[1])

    def read_from(self, name: Callable[[Any], str], what: Any) -> None:
        """The sample was read from ``name(what)`` (unless a reader before said where)."""
        if self.origin is None:
            self.origin = (name, what)

    def fail(self, policy: str, step: str, exc: ConveyorError) -> None:
        self.failed = f"{step} on {self.where!r}: {exc.message}"
        self.policy = policy
        self.values = {}


def _tolerated(policy: str, exc: Exception) -> bool:
    """Whether a sample's error leaves it out under ``policy`` rather than stopping the
    pipeline: data errors only; a bug (anything but a Conveyor error) always stops it."""
    return policy != "fail" and isinstance(exc, ConveyorError) and not isinstance(exc, Internal)


def _fail(step: Step, exc: Exception, on: str) -> NoReturn:
    """Raise ``exc`` naming the step and what it ran ``on`` (a file, a batch); anything
    but a domain error becomes ``Internal``."""
    if isinstance(exc, ConveyorError):
        exc.message = f"{step.label} on {on}: {exc.message}"
        exc.args = (exc.message,)
        raise exc
    raise Internal(f"{step.label} failed on {on}: {type(exc).__name__}: {exc}") from exc


class SegmentRunner:
    def __init__(self, plan: Plan) -> None:
        self._plan = plan
        self._lock = threading.Lock()
        self.files_read = 0
        #: Samples left out ("skip") or replaced ("replace") in the batches output so far.
        self.skipped = 0
        self.replaced = 0
        #: The readers of local files (``readers.file``): each batch's read in one call.
        self._batch_readers = [(op, binding) for op, binding in plan.readers.items()
                               if binding.source is None and not binding.reads_objects]
        #: Each per-sample segment's work on one sample (None for batch segments).
        self._sample_runs = [
            self._sample_phase(segment.steps, plan.live_after[n], read=n == 0)
            if isinstance(segment, SampleSegment) else None
            for n, segment in enumerate(plan.segments)]

    def start(self, sources: SourceValues, batch_index: int, pool: Executor,
              threads: int) -> BatchWork[SampleState]:
        """Start computing the batch ``batch_index`` from its source values (and fetching
        the objects and byte ranges its readers will read, batches being started in
        order)."""
        for op, values in sources:
            binding = self._plan.readers.get(op)
            if binding is not None and binding.reads_objects:
                if binding.source is None:
                    binding.files.fetch_ahead([binding.entries[i] for i in values])
                else:
                    binding.source.fetch_ahead(values)
        size = self._plan.spec.batch_size
        first = batch_index * size
        states = [SampleState({(op, 0): values[i] for op, values in sources}
                              | {SAMPLE_INDEX_REF: np.array(first + i, dtype=np.uint64)},
                              slot=i)
                  for i in range(size)]
        phases: list[Phase[SampleState]] = []
        if self._batch_readers:
            phases.append(BatchPhase(self._read_files))
        for run, segment, live in zip(self._sample_runs, self._plan.segments,
                                      self._plan.live_after, strict=True):
            if run is not None:
                phases.append(SamplePhase(run))
            else:
                assert isinstance(segment, BatchSegment)
                phases.append(BatchPhase(self._batch_phase(segment.step, batch_index, live)))
        work = BatchWork(states, phases)
        work.start(pool, threads)
        return work

    def outputs(self, states: list[SampleState]) -> list[list[Any]]:
        """Each pipeline output's samples, in order: a failed sample is left out ("skip") or
        takes the values of the batch's next good sample, wrapping around ("replace")."""
        good = [i for i, s in enumerate(states) if not s.failed]
        if len(good) < len(states):
            if not good:
                raise DataFileError(f"every sample of the batch failed; the first: "
                                    f"{states[0].failed}")
            rows: list[SampleState] = []
            for i, state in enumerate(states):
                if not state.failed:
                    rows.append(state)
                elif state.policy == "replace":
                    rows.append(states[next((g for g in good if g > i), good[0])])
            with self._lock:
                self.replaced += sum(s.policy == "replace" for s in states if s.failed)
                self.skipped += sum(s.policy == "skip" for s in states if s.failed)
            states = rows
        columns = [[s.values[ref] for s in states] for ref in self._plan.outputs]
        for output, column in enumerate(columns):
            _check_uniform(output, column, states)
        return columns

    # -- phases --------------------------------------------------------------------------

    def _sample_phase(self, steps: list[Step], live: frozenset[Ref], *,
                      read: bool) -> Callable[[SampleState], None]:
        for step in steps:
            assert isinstance(step.op, SampleOp)

        def run(state: SampleState) -> None:
            if read:
                self._read(state)
            if state.failed:
                return
            values = state.values
            for step in steps:
                inputs = [values[r] for r in step.inputs]
                targs = {k: values[r] for k, r in step.arg_inputs.items()}
                try:
                    outs = step.op.fn(inputs, targs)
                except Exception as exc:
                    if _tolerated(step.on_error, exc):
                        assert isinstance(exc, ConveyorError)
                        state.fail(step.on_error, step.label, exc)
                        return
                    _fail(step, exc, repr(state.where))
                for o, out in enumerate(outs):
                    values[(step.op_index, o)] = out
            state.values = {r: v for r, v in values.items() if r in live}
        return run

    def _batch_phase(self, step: Step, batch_index: int,
                     live: frozenset[Ref]) -> Callable[[list[SampleState]], None]:
        assert isinstance(step.op, BatchOp)
        fn = step.op.fn

        def run(all_states: list[SampleState]) -> None:
            while True:  # once, or again without a sample its on_error policy leaves out
                states = [s for s in all_states if not s.failed]
                if not states:
                    return
                inputs = [[s.values[r] for s in states] for r in step.inputs]
                targs = {k: [s.values[r] for s in states] for k, r in step.arg_inputs.items()}
                try:
                    outs = fn(inputs, targs)
                    break
                except SampleFailed as failure:
                    failed, error = states[failure.index], failure.error
                    if not _tolerated(step.on_error, error):
                        _fail(step, error, repr(failed.where))
                    assert isinstance(error, ConveyorError)
                    failed.fail(step.on_error, step.label, error)
                except Exception as exc:
                    _fail(step, exc, f"batch {batch_index}")
            if len(outs) != step.num_outputs or any(len(o) != len(states) for o in outs):
                raise Internal(f"{step.label} returned {[len(o) for o in outs]} samples per "
                               f"output, expected {step.num_outputs} outputs of "
                               f"{len(states)} samples")
            for o, out in enumerate(outs):
                for state, value in zip(states, out, strict=True):
                    state.values[(step.op_index, o)] = value
            for state in states:
                state.values = {r: v for r, v in state.values.items() if r in live}
        return run

    def _read_files(self, states: list[SampleState]) -> None:
        """Read the batch's files of each reader of local files, one call per reader; each
        sample takes its own (or its error) in ``_read``."""
        read = {op: FileBatch(binding.files,
                              [binding.entries[s.values[(op, 0)]] for s in states])
                for op, binding in self._batch_readers}
        for state in states:
            state.files = read

    def _read(self, state: SampleState) -> None:
        """Replace each reader's sample index with what it reads: the file's bytes and
        label (``readers.file``), or the outputs its source reads (the other readers); and
        each external source's sample with its outputs."""
        values = state.values
        batches, state.files = state.files, None
        for op, binding in self._plan.readers.items():
            index = values[(op, 0)]
            source = binding.source
            try:
                if source is None:
                    entry = binding.entries[index]
                    state.read_from(binding.files.name, entry)
                    batch = batches.get(op) if batches is not None else None
                    if batch is not None:
                        outputs = [batch.take(state.slot), batch.label(state.slot)]
                    else:
                        outputs = [binding.files.read(entry),
                                   np.array([entry.label], dtype=np.int32)]
                else:
                    state.read_from(source.where, index)
                    outputs = source.read(index)
            except ConveyorError as exc:
                if not _tolerated(binding.on_error, exc):
                    raise
                state.fail(binding.on_error, f"{binding.stage.op_type} (op {op})", exc)
                return
            with self._lock:
                self.files_read += 1
            for o, out in enumerate(outputs):
                values[(op, o)] = out
        for op in self._plan.sources:  # computed on the submitting thread, in batch order
            sample = values[(op, 0)]
            state.read_from(str, sample.where)
            for o, out in enumerate(sample.get()):  # a source's error ends the batch
                values[(op, o)] = out


def _check_uniform(output: int, samples: list[Any], states: list[SampleState]) -> None:
    """The samples of one output share a dtype and a number of dimensions (a batch is one
    tensor list, as in DALI); a reader's files that do not are DATA_LOSS naming both."""
    first = samples[0]
    for i, sample in enumerate(samples):
        if sample.dtype != first.dtype or sample.ndim != first.ndim:
            raise DataFileError(
                f"output {output}: sample {i} ({states[i].where!r}) is {sample.dtype} with "
                f"{sample.ndim} dimensions, sample 0 ({states[0].where!r}) is {first.dtype} "
                f"with {first.ndim}: the samples of a batch must share dtype and number of "
                "dimensions")

