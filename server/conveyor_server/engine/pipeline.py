"""The in-process engine: ``Pipeline(spec)`` or ``Pipeline(spec, checkpoint=blob)``.

``spec`` is a ``PipelineSpec`` or what a ``@pipeline_def`` function returns. Restored, a spec
whose seed was drawn (none was given) takes the checkpoint's, as DALI's restore does.

``Pipeline`` is the engine's public face (DALI's pipeline methods, the counters the
service reads, the readers' metadata) and assembles its parts: the plan of the spec
(``plan.py``); the source stages placed where it starts, their states at any later step
(``stages/positions.py``); the batches in order, up to ``prefetch_queue_depth`` computed
ahead of the consumer (``batch_queue.py``); the external sources' epoch ends
(``stages/external_source_epochs.py``); a GPU pipeline's output ring (``staging.py``,
``gpu_staging.py``); and its checkpoints (``checkpoint_writer.py``).

Source stages advance only on the submitting thread, and every random draw is keyed by
global sample index, so the stream does not depend on threads, prefetch or timing. A
checkpoint records the state after the batches *returned* (or, for the service, any
count up to those produced): it is computed from the state the pipeline started at, in
O(1), never by replay.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from conveyor.definition import spec as specs
from conveyor.errors import CorruptCheckpoint, InvalidArgument
from conveyor.v1 import checkpoint_pb2, pipeline_pb2
from conveyor_server.engine.admission.limits import NO_LIMITS, EngineLimits
from conveyor_server.engine.batch_queue import Batch, BatchQueue
from conveyor_server.engine.checkpoint_writer import CheckpointWriter
from conveyor_server.engine.data.listings import ListingArchive, first_change, keep_listings
from conveyor_server.engine.data.object_store import ObjectStores
from conveyor_server.engine.gpu_staging import DeviceHandover, GpuOutputs, gpu_staging
from conveyor_server.engine.identity import checkpoint as ckpt
from conveyor_server.engine.identity.behaviour.measure import Behaviour, process_behaviour
from conveyor_server.engine.identity.engine_id import engine_id
from conveyor_server.engine.ops.threads import single_threaded_opencv
from conveyor_server.engine.plan import Plan, build_plan
from conveyor_server.engine.segments import SegmentRunner
from conveyor_server.engine.stages import MAX_SAMPLES
from conveyor_server.engine.stages.external_source_epochs import EpochCrossings
from conveyor_server.engine.stages.job_share import Share
from conveyor_server.engine.stages.positions import StagePositions
from conveyor_server.engine.stages.source_callables import IN_PROCESS, ExternalSources

#: Whether operators registered in both forms run per batch unless told otherwise.
BATCH_OPS = True


def _engine_identity(spec: pipeline_pb2.PipelineSpec,
                     behaviour: Behaviour | None) -> Callable[[], checkpoint_pb2.EngineId]:
    """The engine id of ``spec``, computed once, when first asked for (measuring this
    process's behaviour then where ``behaviour`` is not given)."""

    @functools.cache
    def identity() -> checkpoint_pb2.EngineId:
        return engine_id(spec, behaviour or process_behaviour())

    return identity


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
        objects: ObjectStores | None = None,
        device_outputs: bool = False,
        cuda_stream: Any = None,
        gpu_streams: int = 1,
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
        ``share``: a data-parallel job's rank (see ``stages/job_share.py``), starting at its step
        and global position (at or after the checkpoint's; by default the checkpoint's
        own share, or a plain pipeline's). ``objects``: the clients of object storage its
        readers use for ``s3://``, ``gs://`` and ``az://`` data (a server's, shared; by
        default configured by the
        environment alone). ``device_outputs``: ``run()`` returns the outputs a GPU
        operator computes on the device, as ``DeviceTensorList``s of CuPy arrays, instead
        of in host memory (``gpu_staging.py``); ``cuda_stream``: the stream the caller
        works on them on (a handle, a CuPy stream or PyTorch's; by default the legacy
        default stream), which waits on the GPU for each batch's work. ``gpu_streams``:
        how many compute streams a GPU pipeline's batches take turns on, so that one
        batch's decode overlaps another's kernels (``device/streams.py``)."""
        body = ckpt.open_blob(checkpoint) if checkpoint is not None else None
        if spec is None:
            if body is None:
                raise InvalidArgument("Pipeline needs a spec, a checkpoint, or both")
            spec = body.spec
        spec = specs.as_spec(spec)
        if body is not None:
            spec = specs.with_checkpoint_seed(spec, body.spec)
        roots = list(data_roots) if data_roots is not None else None
        self.spec = spec
        self.fingerprint = specs.fingerprint(spec)
        #: Holds no reference to the pipeline, so the checkpoint writer may hold it: a
        #: pipeline dropped without close() is freed at once (its source workers with it).
        self._identity = _engine_identity(spec, behaviour)
        self._plan: Plan = build_plan(spec, roots, limits, batch_ops=batch_ops, sources=sources,
                                      objects=objects)
        self._limits = limits
        if gpu_streams < 1:
            raise InvalidArgument(f"gpu_streams: expected at least 1 stream, got {gpu_streams}")
        gpu = GpuOutputs(device_outputs, cuda_stream, gpu_streams)
        self._handover: DeviceHandover | None = None
        try:
            self._start(spec, body, share, listings, pool, gpu)
        except BaseException:
            if self._plan.source_pool is not None:
                self._plan.source_pool.close()
            self._close_files()
            raise

    def _start(self, spec: pipeline_pb2.PipelineSpec, body: Any, share: Share | None,
               listings: ListingArchive | None, pool: Executor | None,
               gpu: GpuOutputs) -> None:
        depth = max(1, spec.prefetch_queue_depth)
        staging = gpu_staging(self._plan, depth, gpu)
        if isinstance(staging, DeviceHandover):
            self._handover = staging
        self._segments = SegmentRunner(
            self._plan, finish=staging.finish if staging is not None else None,
            lanes=gpu.streams)
        single_threaded_opencv()
        self._batch_size = spec.batch_size
        if body is not None:
            self._verify_restore(body, listings)
        self._positions = positions = StagePositions.placed(self._plan.stages, body, share,
                                                            spec.batch_size)
        if listings is not None:
            keep_listings(listings, (b.identity for b in self._plan.readers.values()))
        self.share = positions.share
        self._epochs = EpochCrossings(self._plan.stages)
        threads = max(1, spec.num_threads)
        self._own_pool = pool is None
        self._pool = pool or ThreadPoolExecutor(threads, thread_name_prefix="conveyor-worker")
        self._queue = BatchQueue(self._plan, self._segments, positions, self._epochs, staging,
                                 self._limits, self._pool, threads, depth)
        self._checkpoints = CheckpointWriter(spec, self.fingerprint, self._plan, self._identity,
                                             positions, self._epochs, self._queue)
        if self._plan.source_pool is not None:  # before this pipeline's threads start
            self._plan.source_pool.start()

    def _verify_restore(self, body: checkpoint_pb2.CheckpointBody,
                        listings: ListingArchive | None) -> None:
        """Refuse a checkpoint of another spec, data set or engine, or beyond the furthest
        position, naming why."""
        digests = {op: r.digest for op, r in self._plan.readers.items()}
        ckpt.verify_against(body, self.spec, self.engine_id(), digests,
                            None if listings is None else lambda op, earlier: first_change(
                                listings, self._plan.readers[op].identity, earlier))
        if body.batches * self.spec.batch_size > MAX_SAMPLES:
            raise CorruptCheckpoint(f"checkpoint position {body.batches} batches is beyond "
                                    f"the furthest a pipeline reaches ({MAX_SAMPLES} "
                                    "samples)")

    # -- counters ------------------------------------------------------------------------

    @property
    def batches_returned(self) -> int:
        return self._queue.returned

    @property
    def epoch_started(self) -> bool:
        """Whether the batch last returned opens an external source's epoch: the batch
        before it was that epoch's predecessor's last (its source raised StopIteration
        at the position that followed). A function of the position: the same for a
        pipeline restored there, never of timing. DALI's pipeline raises StopIteration
        before such a batch (``conveyor.definition.pipeline.Pipeline`` does; see
        ``stages/external_source_epochs.py``)."""
        return self._epochs.started

    @property
    def batches_produced(self) -> int:
        """Batches submitted for computation (returned plus prefetched)."""
        return self._queue.produced

    @property
    def produce_until(self) -> float:
        """No batch at or after this index is computed ahead, only when asked for (a
        fan-in worker computes the batches asked of it, not the ones that follow)."""
        return self._queue.produce_until

    @produce_until.setter
    def produce_until(self, batches: float) -> None:
        self._queue.produce_until = batches

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
        return self._positions.start

    # -- running ---------------------------------------------------------------------

    def build(self) -> None:
        """Accepted for DALI compatibility: a Pipeline is built when it is constructed."""

    def run(self) -> Batch:
        """The next batch: one TensorList per pipeline output, the caller's to keep (a GPU
        pipeline's lent out of its output ring, or copied once: ``staging.kept_outputs``;
        on the device with ``device_outputs``)."""
        outputs, taken = self._queue.next()
        return outputs if taken is None else taken.kept(outputs)

    def run_staged(self) -> tuple[Batch, Callable[[], None]]:
        """The next batch and the function to call once done with its bytes: a GPU
        pipeline's outputs are views of an output-ring slot (``output_ring.py``), free for
        another batch only after that call. The stream encodes from them; ``run()``
        copies them out."""
        outputs, taken = self._queue.next()
        return (outputs, lambda: None) if taken is None else taken.lent(outputs)

    def __iter__(self) -> Iterator[Batch]:
        while True:
            yield self.run()

    def next_ready(self, timeout: float) -> bool:
        """Start the prefetch if needed and wait up to ``timeout`` seconds for the next
        batch; True when ``run()`` will return (or raise) without waiting."""
        return self._queue.ready(timeout)

    def wait_prefetched(self) -> None:
        """Block until the batches computed ahead are done (for tests and benchmarks)."""
        self._queue.wait()

    def seek(self, batches: int) -> None:
        """Continue from the position after ``batches`` batches (at or after this pipeline's
        start), dropping prefetched work and what was fetched ahead for it. O(1): the
        stages jump to the computed states."""
        self._queue.seek(batches)

    # -- state ---------------------------------------------------------------------------

    def engine_id(self) -> checkpoint_pb2.EngineId:
        """The identity this pipeline's checkpoints record (see ``engine_id.py``)."""
        return self._identity()

    def states_at(self, batches: int) -> list[checkpoint_pb2.OpState]:
        """Every stage's state before this pipeline's batch ``batches`` (after ``batches``
        batches, unless it is a job's rank), computed without replay."""
        return self._positions.states_at(batches)

    def cut_states(self, batches: int) -> list[checkpoint_pb2.OpState]:
        """Every stage's state at the job's cut before step ``batches`` (for a pipeline that
        is no job's rank, ``states_at``): what a checkpoint records."""
        return self._positions.cut_states(batches)

    def checkpoint_body(self, batches: int | None = None) -> checkpoint_pb2.CheckpointBody:
        return self._checkpoints.body(batches)

    def checkpoint(self, filename: str | None = None, *, batches: int | None = None,
                   past_epoch_end: bool = False) -> bytes:
        """The sealed state after the batches returned so far (or after ``batches``),
        written to ``filename`` too where given (see ``checkpoint_writer.py``).
        ``past_epoch_end``: where an external source stands at the end of an epoch whose
        StopIteration was met, at the next epoch's start instead (DALI's state once
        ``run()`` raised StopIteration: the restored pipeline does not raise it again)."""
        blob = self._checkpoints.blob(batches, past_epoch_end=past_epoch_end)
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
        if self._queue.closed:
            return
        self._queue.close()
        if self._own_pool:
            self._pool.shutdown(wait=True, cancel_futures=True)
        if self._handover is not None:
            self._handover.close()
        if self._plan.source_pool is not None:
            self._plan.source_pool.close()
        self._close_files()

    def _close_files(self) -> None:
        for binding in self._plan.readers.values():
            binding.files.close()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is not None and getattr(self, "_own_pool", False):
            pool.shutdown(wait=False, cancel_futures=True)
