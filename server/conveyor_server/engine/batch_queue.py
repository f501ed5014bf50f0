"""A pipeline's batches in order: those computed ahead of the consumer, the next handed out.

Up to ``prefetch_queue_depth`` batches are computing at once (none at or after
``produce_until`` unless asked for). Submitting a batch advances the source stages on the
submitting thread (a job's rank first jumps them to its next global batch,
``stages/positions.py``) and starts its per-sample and per-batch work on the workers
(``segments.py``, ``batch_work.py``); every random draw is keyed by global sample index,
so the batches do not depend on threads, prefetch or timing. The epoch ends an external
source meets are noted as its batches are produced and read as they are returned
(``stages/external_source_epochs.py``).

A GPU pipeline's batches are copied into its output ring as each is computed, before it
is asked for (``staging.py``); the batch handed out holds views of its slot.

A batch that fails, or whose outputs break the limits, is raised when it is asked for;
the queue then drops the work computed ahead (and what was fetched ahead for it) and puts
the stages back at the returned position, so the next call computes that batch again.
"""

from __future__ import annotations

import math
from collections import deque
from concurrent.futures import CancelledError, Executor

from conveyor.errors import FailedPrecondition
from conveyor.tensor_list import TensorList
from conveyor_server.engine.admission.limits import EngineLimits
from conveyor_server.engine.batch_work import BatchWork
from conveyor_server.engine.plan import Plan
from conveyor_server.engine.segments import SampleState, SegmentRunner
from conveyor_server.engine.stages.external_source_epochs import EpochCrossings
from conveyor_server.engine.stages.positions import StagePositions
from conveyor_server.engine.staging import Batch, Staging, Taken


class BatchQueue:
    def __init__(self, plan: Plan, segments: SegmentRunner, positions: StagePositions,
                 epochs: EpochCrossings, staging: Staging | None, limits: EngineLimits,
                 pool: Executor, threads: int, depth: int) -> None:
        self._plan = plan
        self._segments = segments
        self._positions = positions
        self._epochs = epochs
        #: How a GPU pipeline's outputs reach the caller: through a ring of pinned
        #: buffers, or kept on the device (``gpu_staging.py``).
        self.staging = staging
        self._limits = limits
        self._pool = pool
        self._threads = threads
        self._depth = depth
        self.returned = self.produced = positions.start
        self._inflight: deque[BatchWork[SampleState]] = deque()
        #: No batch at or after this index is computed ahead, only when asked for (a
        #: fan-in worker computes the batches asked of it, not the ones that follow).
        self.produce_until: float = math.inf
        self.closed = False

    def next(self) -> tuple[Batch, Taken | None]:
        """The next batch and, for a GPU pipeline, what was taken for it: the ring slot its
        outputs are views of, or the batch handed over on the device."""
        self._fill()
        self._stage_ready()
        pending = self._inflight.popleft()
        staged = None
        try:
            states = pending.results()
            if self.staging is not None:
                staged = self.staging.take(pending, states, self.returned)
            results = self._segments.outputs(states)
            outputs = [TensorList(samples, self._plan.layouts.get(ref, ""))
                       for ref, samples in zip(self._plan.outputs, results, strict=True)]
            self._limits.check_batch(outputs, self.returned)
        except CancelledError:
            raise FailedPrecondition("pipeline was closed while computing a batch") from None
        except BaseException:
            if staged is not None:
                staged.release()
            self._rewind()
            raise
        self._epochs.returned(self.returned)
        self.returned += 1
        self._stage_ready()
        return tuple(outputs), staged

    def ready(self, timeout: float) -> bool:
        """Start the prefetch if needed and wait up to ``timeout`` seconds for the next
        batch; True when ``next()`` will return (or raise) without waiting."""
        self._fill()
        self._stage_ready()
        ready = self._inflight[0].ready(timeout)
        if ready:
            self._stage_ready()
        return ready

    def wait(self) -> None:
        """Block until the batches computed ahead are done."""
        for pending in list(self._inflight):
            pending.ready(None)

    def seek(self, batches: int) -> None:
        """Continue from the position after ``batches`` batches, dropping the work computed
        ahead. O(1): the stages jump to the computed states."""
        states = self._positions.states_at(batches)
        self._drop()
        self._positions.reset(states)
        self.returned = self.produced = batches

    def close(self) -> None:
        """Cancel the work computed ahead; ``next()`` raises from now on."""
        self.closed = True
        self._drop()

    def _stage_ready(self) -> None:
        """Start copying the computed batches out of the GPU, ahead of being asked for."""
        if self.staging is not None:
            self.staging.ahead(self._inflight, self.returned)

    def _fill(self) -> None:
        """Keep ``prefetch_queue_depth`` batches computing."""
        if self.closed:
            raise FailedPrecondition("pipeline is closed")
        try:
            while len(self._inflight) < self._depth and (
                    self.produced < self.produce_until or not self._inflight):
                self._submit()
        except RuntimeError:  # the pool was shut down by close() on another thread
            if self.closed:
                raise FailedPrecondition("pipeline is closed") from None
            raise

    def _submit(self) -> None:
        share = self._positions.share
        if share.strided:  # a job's rank: jump to its next global batch
            self._positions.reset(self._positions.states_at(self.produced))
        per_stage = [(stage.op_index, stage.next()) for stage in self._positions.stages]
        self._epochs.produced(self.produced)
        self._inflight.append(self._segments.start(
            per_stage, share.block(self.produced), self._pool, self._threads))
        self.produced += 1

    def _drop(self) -> None:
        """Cancel the work computed ahead, drop what its readers fetched ahead for it (the
        objects and byte ranges of ``data/fetch_ahead.py``) and give back its ring slots."""
        for pending in self._inflight:
            pending.cancel()
        self._inflight.clear()
        for binding in self._plan.readers.values():
            binding.files.forget_ahead()
        self._epochs.drop()
        if self.staging is not None:
            self.staging.drop()

    def _rewind(self) -> None:
        """Drop the work computed ahead and put the stages back at the returned position."""
        self.seek(self.returned)
