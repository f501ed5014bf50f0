"""Running a plan's segments over one batch: each sample's state, file and steps.

A sample's state holds its values by (op, output) and how to name its data file, which
errors name (named only then). Where the pipeline reads local files (``readers.file``), the
first phase reads the batch's files of each such reader in one call (``data/file_batch.py``)
on a worker, with the GIL released. The next takes each sample's file (its bytes from that
read, or its error) and label and runs the first per-sample segment; each later per-sample
segment is a phase of its own. Batch segments that follow one another are one phase, a
chain: it gathers the inputs it needs from the samples once, in sample order, passes each
step's outputs to the next steps as whole columns (the GPU's operators hand one another
their batch with no per-sample state in between), and hands each sample its part only of
what is needed after the chain. A sample a step fails on (``SampleFailed``) is left out or
replaced under the step's ``on_error`` policy: its row leaves every column the chain made
so far, and the step runs again without it. ``BatchWork`` runs the phases on the worker
threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NoReturn

import numpy as np

from conveyor.errors import ConveyorError, DataFileError, Internal
from conveyor_server.engine.batch_work import BatchEnd, BatchPhase, BatchWork, Phase, SamplePhase
from conveyor_server.engine.data.file_batch import FileBatch
from conveyor_server.engine.device import streams
from conveyor_server.engine.ops.registry import BatchOp, SampleFailed, SampleOp
from conveyor_server.engine.plan import (
    SAMPLE_INDEX_REF,
    BatchSegment,
    Plan,
    Ref,
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


#: A chain of batch steps' work: (the batch's index, its samples' states).
ChainRun = Callable[[int, list[SampleState]], None]
#: A batch's last phase: marks the end of its work in the ``BatchEnd`` (given its states).
Finish = Callable[[BatchEnd, list[SampleState]], None]


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
    def __init__(self, plan: Plan, finish: Finish | None = None, lanes: int = 1) -> None:
        """``finish``: each batch's last phase, where given: a GPU pipeline marks there the
        end of the batch's work (in the batch's ``BatchWork.end``), which its copies or its
        caller wait for. ``lanes``: the compute streams a GPU pipeline's batches take turns
        on (``device/streams.py``): the k-th batch this runner starts runs its batch phases
        in lane k mod ``lanes``."""
        self._plan = plan
        self._lanes = lanes
        self._started = 0  # batches started (on the one thread that starts them)
        self._lock = threading.Lock()
        self.files_read = 0
        #: Samples left out ("skip") or replaced ("replace") in the batches output so far.
        self.skipped = 0
        self.replaced = 0
        #: The readers of local files (``readers.file``): each batch's read in one call.
        self._batch_readers = [(op, binding) for op, binding in plan.readers.items()
                               if binding.source is None and not binding.reads_objects]
        #: The batch's phases after the files are read: a per-sample segment's work on one
        #: sample, or a chain of batch segments' work on the batch (given its index).
        self._phases: list[SamplePhase[SampleState] | ChainRun] = []
        chain: list[Step] = []
        for n, segment in enumerate(plan.segments):
            if isinstance(segment, BatchSegment):
                chain.append(segment.step)
                following = plan.segments[n + 1] if n + 1 < len(plan.segments) else None
                if not isinstance(following, BatchSegment):
                    self._phases.append(self._chain(chain, plan.live_after[n]))
                    chain = []
            else:
                self._phases.append(SamplePhase(
                    self._sample_phase(segment.steps, plan.live_after[n], read=n == 0)))
        self._finish = finish

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
        # The lane counts batches started, not their index: a job's rank starts every
        # world-size-th batch, which would otherwise keep to one lane.
        lane = self._started % self._lanes
        self._started += 1
        phases += [phase if isinstance(phase, SamplePhase)
                   else self._in_lane(lane, partial(phase, batch_index))
                   for phase in self._phases]
        end = BatchEnd()
        if self._finish is not None:
            phases.append(self._in_lane(lane, partial(self._finish, end)))
        work = BatchWork(states, phases, end)
        work.start(pool, threads)
        return work

    def _in_lane(self, lane: int, run: Callable[[list[SampleState]], None]
                 ) -> BatchPhase[SampleState]:
        """``run`` as a batch phase whose GPU work goes to ``lane``'s compute stream."""
        if self._lanes == 1:
            return BatchPhase(run)

        def in_lane(states: list[SampleState]) -> None:
            with streams.lane(lane):
                run(states)
        return BatchPhase(in_lane)

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

    def _chain(self, steps: list[Step],
               live: frozenset[Ref]) -> ChainRun:
        """Batch steps run one after another on the batch: each step's inputs are the
        columns the chain made, or gathered from the samples once; ``live``: what the
        samples keep after the chain. A column the chain made is dropped after the last
        step that reads it (a GPU batch's memory is not held past its use)."""
        ops: list[BatchOp] = []
        for step in steps:
            assert isinstance(step.op, BatchOp)
            ops.append(step.op)
        made_here = {(step.op_index, o) for step in steps for o in range(step.num_outputs)}
        kept = [ref for ref in made_here if ref in live]
        last_read: dict[Ref, int] = {}  # each column the chain makes: the last step to read it
        for j, step in enumerate(steps):
            for o in range(step.num_outputs):
                last_read[(step.op_index, o)] = j
            for ref in (*step.inputs, *step.arg_inputs.values()):
                if ref in made_here:
                    last_read[ref] = j
        done_after = [[ref for ref, last in last_read.items() if last == j and ref not in live]
                      for j in range(len(steps))]

        def run(batch_index: int, all_states: list[SampleState]) -> None:
            rows = [s for s in all_states if not s.failed]
            columns: dict[Ref, list[Any]] = {}

            def column(ref: Ref) -> list[Any]:
                if ref not in columns:
                    columns[ref] = [s.values[ref] for s in rows]
                return columns[ref]

            for j, (step, op) in enumerate(zip(steps, ops, strict=True)):
                while True:  # once, or again without a sample its on_error policy leaves out
                    if not rows:
                        return
                    inputs = [column(r) for r in step.inputs]
                    targs = {k: column(r) for k, r in step.arg_inputs.items()}
                    try:
                        outs = op.fn(inputs, targs)
                        break
                    except SampleFailed as failure:
                        failed, error = rows[failure.index], failure.error
                        if not _tolerated(step.on_error, error):
                            _fail(step, error, repr(failed.where))
                        assert isinstance(error, ConveyorError)
                        failed.fail(step.on_error, step.label, error)
                        del rows[failure.index]
                        for made in columns.values():
                            del made[failure.index]
                    except Exception as exc:
                        _fail(step, exc, f"batch {batch_index}")
                if len(outs) != step.num_outputs or any(len(o) != len(rows) for o in outs):
                    raise Internal(f"{step.label} returned {[len(o) for o in outs]} samples "
                                   f"per output, expected {step.num_outputs} outputs of "
                                   f"{len(rows)} samples")
                for o, out in enumerate(outs):
                    columns[(step.op_index, o)] = list(out)
                for ref in done_after[j]:
                    del columns[ref]
            for n, state in enumerate(rows):
                values = {r: v for r, v in state.values.items() if r in live}
                for ref in kept:
                    values[ref] = columns[ref][n]
                state.values = values
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

