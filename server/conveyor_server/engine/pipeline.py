"""The in-process engine: ``Pipeline(spec)`` or ``Pipeline(spec, checkpoint=blob)``.

``spec`` is a ``PipelineSpec`` or what a ``@pipeline_def`` function returns. Restored, a spec
whose seed was drawn (none was given) takes the checkpoint's, as DALI's restore does.

Batches are produced in order; each batch's per-sample work runs on ``num_threads``
workers, its per-batch operators at barriers between (see ``segments.py``), and up to
``prefetch_queue_depth`` batches are computed ahead of the consumer.
Source stages advance only on the submitting thread, and every random draw is keyed by
global sample index, so the stream does not depend on threads, prefetch or timing.

A checkpoint records the state after the batches *returned* (or, for the service, any
count up to those produced): it is computed from the state the pipeline started at, in
O(1), never by replay.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import CancelledError, Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from conveyor import spec as specs
from conveyor.errors import (
    CheckpointingDisabled,
    CorruptCheckpoint,
    FailedPrecondition,
    InvalidArgument,
)
from conveyor.tensor_list import TensorList
from conveyor.v1 import checkpoint_pb2, pipeline_pb2
from conveyor_server.engine.admission.limits import NO_LIMITS, EngineLimits
from conveyor_server.engine.batch_work import BatchWork
from conveyor_server.engine.data.listings import ListingArchive, first_change, keep_listings
from conveyor_server.engine.gpu_staging import copy_out, output_stager
from conveyor_server.engine.identity import checkpoint as ckpt
from conveyor_server.engine.identity.behaviour.measure import Behaviour, process_behaviour
from conveyor_server.engine.identity.engine_id import engine_id
from conveyor_server.engine.job_share import Share, place_stages
from conveyor_server.engine.ops.threads import single_threaded_opencv
from conveyor_server.engine.plan import Plan, build_plan
from conveyor_server.engine.segments import SampleState, SegmentRunner
from conveyor_server.engine.stages import MAX_SAMPLES
from conveyor_server.engine.stages.external_source import ExternalSourceStage
from conveyor_server.engine.stages.source_callables import IN_PROCESS, ExternalSources
from conveyor_server.engine.staging import OutputStaging, StagedBatch

Batch = tuple[TensorList, ...]


#: Whether operators registered in both forms run per batch unless told otherwise.
BATCH_OPS = True


class Pipeline:
    def __init__(
        self,
        spec: specs.Definition | None = None,
        checkpoint: bytes | None = None,
        *,
        data_roots: Sequence[str | Path] | None = None,
        limits: EngineLimits = NO_LIMITS,
        batch_ops: bool = BATCH_OPS,
        behaviour: Behaviour | None = None,
        listings: ListingArchive | None = None,
        pool: Executor | None = None,
        sources: ExternalSources = IN_PROCESS,
        share: Share | None = None,
    ) -> None:
        """``batch_ops``: run operators registered per batch in that form (they give the
        same bytes as their per-sample form; see ``ops/registry.py``). ``behaviour``: this
        process's measured behaviour (a server measures it at start); measured on first
        use when not given. ``listings``: where the readers' file listings are kept, so
        that a restore over changed data names the first changed file. ``pool``: the
        workers to compute on, shared with other pipelines (a server bounds its compute
        threads this way); by default the pipeline has ``num_threads`` workers of its own.
        The per-sample work of a batch is split into ``num_threads`` tasks either way.
        ``sources``: the callables an ``external_source`` may name (a server passes its
        configured ones; in process, by default, the callable ``fn.external_source`` was
        given, or any ``"module:function"``).
        ``share``: a data-parallel job's rank (see ``job_share.py``), starting at its step
        and global position (at or after the checkpoint's; by default the checkpoint's
        own share, or a plain pipeline's)."""
        body = ckpt.open_blob(checkpoint) if checkpoint is not None else None
        if spec is None:
            if body is None:
                raise InvalidArgument("Pipeline needs a spec, a checkpoint, or both")
            spec = body.spec
        spec = specs.as_spec(spec)
        if body is not None:
            spec = specs.with_checkpoint_seed(spec, body.spec)
        roots = [Path(r) for r in data_roots] if data_roots is not None else None
        self.spec = spec
        self.fingerprint = specs.fingerprint(spec)
        self._behaviour = behaviour
        self._identity: checkpoint_pb2.EngineId | None = None
        self._constant_body: bytes | None = None
        self._plan: Plan = build_plan(spec, roots, limits, batch_ops=batch_ops, sources=sources)
        self._limits = limits
        try:
            self._start(spec, body, share, listings, pool)
        except BaseException:
            if self._plan.source_pool is not None:
                self._plan.source_pool.close()
            raise

    def _start(self, spec: pipeline_pb2.PipelineSpec, body: Any, share: Share | None,
               listings: ListingArchive | None, pool: Executor | None) -> None:
        self._segments = SegmentRunner(self._plan)
        single_threaded_opencv()
        self._batch_size = spec.batch_size
        if body is not None:
            digests = {op: r.digest for op, r in self._plan.readers.items()}
            ckpt.verify_against(body, spec, self.engine_id(), digests,
                                None if listings is None else lambda op, earlier: first_change(
                                    listings, self._plan.readers[op].identity, earlier))
            if body.batches * spec.batch_size > MAX_SAMPLES:
                raise CorruptCheckpoint(f"checkpoint position {body.batches} batches is beyond "
                                        f"the furthest a pipeline reaches ({MAX_SAMPLES} "
                                        "samples)")
        share = place_stages(self._plan.stages, body, share, spec.batch_size)
        if listings is not None:
            keep_listings(listings, (b.identity for b in self._plan.readers.values()))
        self.share = share
        base = share.step
        self._base_batches = base
        # The stages' states at the start's cut: every later state is computed from them.
        self._base_states = [stage.get_state() for stage in self._plan.stages]
        self._returned = base
        self._produced = base
        self._inflight: deque[BatchWork[SampleState]] = deque()
        #: The produced batches (by index) that open an external source's epoch.
        self._crossings: set[int] = set()
        self._epoch_started = False
        self._depth = max(1, spec.prefetch_queue_depth)
        #: No batch at or after this index is computed ahead, only when asked for (a
        #: fan-in worker computes the batches asked of it, not the ones that follow).
        self.produce_until: float = math.inf
        self._threads = max(1, spec.num_threads)
        #: A GPU pipeline's outputs leave the GPU through a ring of pinned buffers.
        stager = output_stager(self._plan, self._depth)
        self._staging = OutputStaging(stager) if stager is not None else None
        self._own_pool = pool is None
        self._pool = pool or ThreadPoolExecutor(self._threads,
                                                thread_name_prefix="conveyor-worker")
        self._closed = False
        if self._plan.source_pool is not None:  # before this pipeline's threads start
            self._plan.source_pool.start()

    # -- counters ------------------------------------------------------------------------

    @property
    def batches_returned(self) -> int:
        return self._returned

    @property
    def epoch_started(self) -> bool:
        """Whether the batch last returned opens an external source's epoch: the batch
        before it was that epoch's predecessor's last (its source raised StopIteration
        at the position that followed). A function of the position: the same for a
        pipeline restored there, never of timing. DALI's pipeline raises StopIteration
        before such a batch (``conveyor.pipeline.Pipeline`` does)."""
        return self._epoch_started

    @property
    def batches_produced(self) -> int:
        """Batches submitted for computation (returned plus prefetched)."""
        return self._produced

    @property
    def files_read(self) -> int:
        """Data files read so far by this pipeline object (prefetch included)."""
        return self._segments.files_read

    @property
    def samples_skipped(self) -> int:
        """Samples left out of the batches returned so far (``on_error="skip"``)."""
        return self._segments.skipped

    @property
    def samples_replaced(self) -> int:
        """Samples replaced in the batches returned so far (``on_error="replace"``)."""
        return self._segments.replaced

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def start_batches(self) -> int:
        """The position this pipeline started from (0, or its checkpoint's)."""
        return self._base_batches

    # -- running ---------------------------------------------------------------------

    def build(self) -> None:
        """Accepted for DALI compatibility: a Pipeline is built when it is constructed."""

    def run(self) -> Batch:
        """The next batch: one TensorList per pipeline output."""
        outputs, staged = self._next_batch()
        if staged is None:
            return outputs
        # Out of the ring, once: the caller may keep these as long as it likes (the outputs
        # the ring does not hold, such as a reader's labels, are returned as they are).
        # ``run_staged`` hands out the ring's own views instead, valid until released.
        try:
            copies = []
            for out in outputs:
                samples = copy_out(list(out), staged.slot.buffer)
                copies.append(out if samples is None else
                              TensorList(samples, out.layout(), out.dtype))
        finally:
            staged.release()
        return tuple(copies)

    def run_staged(self) -> tuple[Batch, Callable[[], None]]:
        """The next batch and the function to call once done with its bytes: a GPU
        pipeline's outputs are views of an output-ring slot (``output_ring.py``), free for
        another batch only after that call. The stream encodes from them; ``run()``
        copies them out."""
        outputs, staged = self._next_batch()
        return outputs, (staged.release if staged is not None else lambda: None)

    def _next_batch(self) -> tuple[Batch, StagedBatch | None]:
        self._fill()
        self._stage_ready()
        pending = self._inflight.popleft()
        staged = None
        try:
            states = pending.results()
            if self._staging is not None:
                staged = self._staging.take(pending, states, self._returned)
            results = self._segments.outputs(states)
            outputs = [TensorList(samples, self._plan.layouts.get(ref, ""))
                       for ref, samples in zip(self._plan.outputs, results, strict=True)]
            self._limits.check_batch(outputs, self._returned)
        except CancelledError:
            raise FailedPrecondition("pipeline was closed while computing a batch") from None
        except BaseException:
            if staged is not None:
                staged.release()
            self._rewind()
            raise
        self._epoch_started = self._returned in self._crossings
        self._crossings.discard(self._returned)
        self._returned += 1
        self._stage_ready()
        return tuple(outputs), staged

    def _stage_ready(self) -> None:
        """Start copying the computed batches out of the GPU, ahead of being asked for."""
        if self._staging is not None:
            self._staging.ahead(self._inflight, self._returned)

    def __iter__(self) -> Iterator[Batch]:
        while True:
            yield self.run()

    def next_ready(self, timeout: float) -> bool:
        """Start the prefetch if needed and wait up to ``timeout`` seconds for the next
        batch; True when ``run()`` will return (or raise) without waiting."""
        self._fill()
        self._stage_ready()
        ready = self._inflight[0].ready(timeout)
        if ready:
            self._stage_ready()
        return ready

    def _fill(self) -> None:
        """Keep ``prefetch_queue_depth`` batches computing."""
        if self._closed:
            raise FailedPrecondition("pipeline is closed")
        try:
            while len(self._inflight) < self._depth and (
                    self._produced < self.produce_until or not self._inflight):
                self._submit()
        except RuntimeError:  # the pool was shut down by close() on another thread
            if self._closed:
                raise FailedPrecondition("pipeline is closed") from None
            raise

    def _submit(self) -> None:
        if self.share.strided:  # a job's rank: jump to its next global batch
            for stage, state in zip(self._plan.stages, self.states_at(self._produced),
                                    strict=True):
                stage.reset(state)
        per_stage = [(stage.op_index, stage.next()) for stage in self._plan.stages]
        if any(isinstance(stage, ExternalSourceStage) and stage.epoch_crossed
               for stage in self._plan.stages):
            self._crossings.add(self._produced)
        self._inflight.append(self._segments.start(
            per_stage, self.share.block(self._produced), self._pool, self._threads))
        self._produced += 1

    def wait_prefetched(self) -> None:
        """Block until the batches computed ahead are done (for tests and benchmarks)."""
        for pending in list(self._inflight):
            pending.ready(None)

    def seek(self, batches: int) -> None:
        """Continue from the position after ``batches`` batches (at or after this pipeline's
        start), dropping prefetched work. O(1): the stages jump to the computed states."""
        states = self.states_at(batches)
        for pending in self._inflight:
            pending.cancel()
        self._inflight.clear()
        self._crossings.clear()
        if self._staging is not None:
            self._staging.drop()
        for stage, state in zip(self._plan.stages, states, strict=True):
            stage.reset(state)
        self._returned = self._produced = batches

    def _rewind(self) -> None:
        """Drop prefetched work and put the stages back at the returned position."""
        self.seek(self._returned)

    # -- state ---------------------------------------------------------------------------

    def engine_id(self) -> checkpoint_pb2.EngineId:
        """The identity this pipeline's checkpoints record (see ``engine_id.py``)."""
        if self._identity is None:
            self._identity = engine_id(self.spec, self._behaviour or process_behaviour())
        return self._identity

    def states_at(self, batches: int) -> list[checkpoint_pb2.OpState]:
        """Every stage's state before this pipeline's batch ``batches`` (after ``batches``
        batches, unless it is a job's rank), computed without replay."""
        return self._states_at_global(batches, self.share.block(batches))

    def cut_states(self, batches: int) -> list[checkpoint_pb2.OpState]:
        """Every stage's state at the job's cut before step ``batches`` (for a pipeline that
        is no job's rank, ``states_at``): what a checkpoint records."""
        return self._states_at_global(batches, self.share.cut(batches))

    def _states_at_global(self, batches: int, block: int) -> list[checkpoint_pb2.OpState]:
        if batches < self._base_batches:
            raise FailedPrecondition(f"batch {batches} is before this pipeline's start "
                                     f"({self._base_batches})")
        if block * self._batch_size > MAX_SAMPLES:
            raise InvalidArgument(f"batch {batches} is beyond the furthest position a "
                                  f"pipeline reaches ({MAX_SAMPLES} samples)")
        samples = (block - self.share.global_batches) * self._batch_size
        return [stage.advanced(state, samples)
                for stage, state in zip(self._plan.stages, self._base_states, strict=True)]

    def checkpoint_body(self, batches: int | None = None) -> checkpoint_pb2.CheckpointBody:
        body = self._constant_body_message()
        body.MergeFrom(self._position_body(batches, past_epoch_end=False))
        return body

    def _constant_body_message(self) -> checkpoint_pb2.CheckpointBody:
        """What every checkpoint of this pipeline holds (fields 1 to 5)."""
        return checkpoint_pb2.CheckpointBody(
            format_version=ckpt.FORMAT_VERSION,
            spec=self.spec,
            fingerprint=self.fingerprint,
            file_lists=[r.digest for r in self._plan.readers.values()],
            engine=self.engine_id(),
        )

    def _position_body(self, batches: int | None, *,
                       past_epoch_end: bool) -> checkpoint_pb2.CheckpointBody:
        """What depends on the position (fields 6 and 7, the last ones)."""
        if not self.spec.enable_checkpointing:
            raise CheckpointingDisabled(
                "checkpointing is disabled for this pipeline: build it with "
                "enable_checkpointing=True")
        n = self._returned if batches is None else batches
        if n > self._produced:
            raise FailedPrecondition(f"cannot checkpoint after {n} batches: only "
                                     f"{self._produced} were produced")
        states = self.cut_states(n)
        if past_epoch_end:
            states = [stage.past_epoch_end(state) if isinstance(stage, ExternalSourceStage)
                      else state for stage, state in zip(self._plan.stages, states, strict=True)]
        body = checkpoint_pb2.CheckpointBody(op_states=states, batches=n)
        if self.share.job:
            body.job.CopyFrom(self.share.job_position(n))
        return body

    def checkpoint(self, filename: str | None = None, *, batches: int | None = None,
                   past_epoch_end: bool = False) -> bytes:
        """The sealed state after the batches returned so far (or after ``batches``).
        ``past_epoch_end``: where an external source stands at the end of an epoch whose
        StopIteration was met, at the next epoch's start instead (DALI's state once
        ``run()`` raised StopIteration: the restored pipeline does not raise it again).

        Deterministic serialization writes fields in number order and the position's
        fields come last, so the constant part is serialized once and the position's
        appended: the same bytes as serializing the whole body, for less work per
        checkpoint (a service checkpoints on every trainer's call)."""
        position = self._position_body(batches, past_epoch_end=past_epoch_end
                                       ).SerializeToString(deterministic=True)
        if self._constant_body is None:
            self._constant_body = self._constant_body_message().SerializeToString(
                deterministic=True)
        blob = ckpt.seal_payload(self._constant_body + position)
        if filename is not None:
            Path(filename).write_bytes(blob)
        return blob

    # -- metadata ------------------------------------------------------------------------

    def epoch_size(self, name: str | None = None) -> Any:
        return self._per_reader(name, lambda stage: stage.num_files)

    def epoch_sizes(self) -> dict[str, int]:
        """Samples per epoch of every reader, by name (``op<index>`` for unnamed ones)."""
        return {b.name or f"op{op}": b.stage.num_files for op, b in self._plan.readers.items()}

    def reader_meta(self, name: str | None = None) -> Any:
        return self._per_reader(name, lambda stage: stage.meta())

    def reader_metas(self) -> dict[str, Any]:
        """The metadata of every reader, by name (``op<index>`` for unnamed ones)."""
        return {b.name or f"op{op}": b.stage.meta() for op, b in self._plan.readers.items()}

    def _per_reader(self, name: str | None, value: Callable[[Any], Any]) -> Any:
        """``value`` of the reader ``name``; of every reader by name where the pipeline has
        several and no name is given."""
        if name is None and len(self._plan.readers) != 1:
            return {b.name: value(b.stage) for b in self._plan.readers.values()}
        return value(self._plan.reader(name).stage)

    # -- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for pending in self._inflight:
            pending.cancel()
        self._inflight.clear()
        self._crossings.clear()
        if self._staging is not None:
            self._staging.drop()
        if self._own_pool:
            self._pool.shutdown(wait=True, cancel_futures=True)
        if self._plan.source_pool is not None:
            self._plan.source_pool.close()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is not None and getattr(self, "_own_pool", False):
            pool.shutdown(wait=False, cancel_futures=True)
