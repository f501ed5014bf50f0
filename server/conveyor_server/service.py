"""The Conveyor gRPC servicer: named pipelines, their streams and their checkpoints."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import TypeVar

import grpc

from conveyor import spec as specs
from conveyor.errors import (
    CheckpointMismatch,
    ConveyorError,
    DataFileError,
    FailedPrecondition,
    Fenced,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
)
from conveyor.v1 import pipeline_pb2, service_pb2, service_pb2_grpc
from conveyor.wire import encode_frames
from conveyor_server import checkpoint as ckpt
from conveyor_server.errors_map import streaming, unary
from conveyor_server.hosted import HostedPipeline
from conveyor_server.limits import NO_LIMITS, EngineLimits
from conveyor_server.metrics import Metrics
from conveyor_server.pipeline import Pipeline
from conveyor_server.store import Owner, Store, StoredCheckpoint, check_name, checkpoint_id

log = logging.getLogger("conveyor.server")
T = TypeVar("T")
#: Time kept back from a caller's deadline for the reply to reach it.
_DEADLINE_MARGIN = 0.05

CHECKPOINT_ID_KEY = "conveyor-checkpoint-id"
CHECKPOINT_BATCHES_KEY = "conveyor-checkpoint-batches"


def checkpoint_info(c: StoredCheckpoint) -> service_pb2.CheckpointInfo:
    return service_pb2.CheckpointInfo(
        id=c.id, pipeline=c.pipeline, batches=c.batches, created_unix_ms=c.created_ms,
        size_bytes=c.size, server=c.server, generation=c.generation)


def _held_elsewhere(name: str, owner: Owner) -> service_pb2.PipelineInfo:
    """What Redis knows of a pipeline this server does not host."""
    return service_pb2.PipelineInfo(
        name=name, holder=owner.holder, generation=owner.generation,
        fingerprint=owner.fingerprint,
        latest_checkpoint=checkpoint_id(name, owner.latest) if owner.latest else "")


class ConveyorService(service_pb2_grpc.ConveyorServicer):
    def __init__(self, store: Store, address: str, data_roots: Sequence[str | Path], *,
                 keep_checkpoints: int = 10, max_pipelines: int = 64,
                 token: str | None = None, drain_wait: float = 5.0,
                 limits: EngineLimits = NO_LIMITS,
                 metrics: Metrics | None = None) -> None:
        self.store = store
        self.limits = limits
        self.address = address
        self.instance = uuid.uuid4().hex
        self.data_roots = [Path(r) for r in data_roots]
        self.keep_checkpoints = keep_checkpoints
        self.max_pipelines = max_pipelines
        self.token = token
        self.drain_wait = drain_wait
        self.draining = threading.Event()
        self._pipelines: dict[str, HostedPipeline] = {}
        self._store_calls = ThreadPoolExecutor(4, thread_name_prefix="store-call")
        self._lock = threading.Lock()
        self.metrics = metrics or Metrics()
        self.metrics.hosted_pipelines.set_function(self._count_hosted)

    # -- hosted pipelines ------------------------------------------------------------

    def hosted(self) -> list[HostedPipeline]:
        with self._lock:
            return list(self._pipelines.values())

    def _count_hosted(self) -> float:
        with self._lock:
            return len(self._pipelines)

    def _local(self, name: str) -> HostedPipeline:
        with self._lock:
            hosted = self._pipelines.get(check_name(name))
        if hosted is not None:
            return hosted
        owner = self.store.owner(name)
        if owner is None:
            raise NotFound(f"pipeline {name!r} does not exist")
        raise FailedPrecondition(f"pipeline {name!r} is held by server {owner.holder}, "
                                 f"not by this one ({self.address})")

    def _host(self, hosted: HostedPipeline) -> None:
        with self._lock:
            previous = self._pipelines.get(hosted.name)
            self._pipelines[hosted.name] = hosted
        if previous is not None:
            previous.end(f"pipeline {hosted.name!r} was restored again on {self.address}")
            previous.engine.close()

    def _check_capacity(self, name: str) -> None:
        with self._lock:
            if name not in self._pipelines and len(self._pipelines) >= self.max_pipelines:
                raise ResourceExhausted(f"this server hosts {len(self._pipelines)} pipelines, "
                                        f"its limit (limits.max_pipelines = {self.max_pipelines})")

    def _build(self, spec: pipeline_pb2.PipelineSpec | None,
               blob: bytes | None = None) -> Pipeline:
        return Pipeline(spec, checkpoint=blob, data_roots=self.data_roots, limits=self.limits)

    def fence(self, seen: HostedPipeline, holder: str | None) -> None:
        """End the local pipeline ``seen`` (as the watcher saw it): restored on ``holder``,
        or (None) deleted through another server. Nothing happens if the name now holds
        another pipeline (deleted and created again here meanwhile) or is being deleted."""
        name = seen.name
        with self._lock:
            hosted = self._pipelines.get(name)
        if hosted is not seen or hosted.deleting:
            return
        what = (f"was restored on server {holder}" if holder is not None
                else "was deleted through another server")
        if hosted.end(f"pipeline {name!r} {what}: this server is fenced and its stream and "
                      "checkpoints are refused"):
            log.warning("pipeline %s %s: fenced here", name, what,
                        extra={"pipeline": name, "holder": holder or ""})

    # -- RPCs ----------------------------------------------------------------------------

    @unary
    def CreatePipeline(self, request: service_pb2.CreatePipelineRequest,
                       context: grpc.ServicerContext) -> service_pb2.CreatePipelineResponse:
        name = check_name(request.name)
        if not request.HasField("spec"):
            raise InvalidArgument("CreatePipeline needs a spec")
        self._check_capacity(name)
        engine = self._build(request.spec)
        keep = request.keep_checkpoints or self.keep_checkpoints
        try:
            gen = self.store.create(name, self.address, self.instance,
                                    engine.fingerprint.hex(), keep)
        except BaseException:
            engine.close()
            raise
        hosted = HostedPipeline(name, engine, gen, keep)
        self._host(hosted)
        log.info("created pipeline %s (generation %d)", name, gen,
                 extra={"pipeline": name, "generation": gen})
        return service_pb2.CreatePipelineResponse(pipeline=hosted.info(self.address))

    @unary
    def DeletePipeline(self, request: service_pb2.DeletePipelineRequest,
                       context: grpc.ServicerContext) -> service_pb2.DeletePipelineResponse:
        hosted = self._local(request.name)
        with hosted.cond:
            mine, hosted.deleting = not hosted.deleting, True
        try:
            if hosted.ended is None:
                self.store.release(hosted.name, self.instance, request.keep_checkpoints)
        except BaseException:
            if mine:
                hosted.deleting = False
            raise
        with self._lock:
            self._pipelines.pop(hosted.name, None)
        hosted.end(f"pipeline {hosted.name!r} was deleted", NotFound)
        hosted.engine.close()
        log.info("deleted pipeline %s (checkpoints %s)", hosted.name,
                 "kept" if request.keep_checkpoints else "deleted",
                 extra={"pipeline": hosted.name, "keep_checkpoints": request.keep_checkpoints})
        return service_pb2.DeletePipelineResponse()

    @unary
    def ListPipelines(self, request: service_pb2.ListPipelinesRequest,
                      context: grpc.ServicerContext) -> service_pb2.ListPipelinesResponse:
        names = self.store.names()
        owners = self.store.owners(names)
        local = {h.name: h for h in self.hosted()}
        out = service_pb2.ListPipelinesResponse()
        for name in names:
            owner = owners.get(name)
            hosted = local.get(name)
            if hosted is not None and owner is not None and owner.instance == self.instance:
                out.pipelines.append(hosted.info(self.address, include_spec=False))
            elif owner is not None:
                out.pipelines.append(_held_elsewhere(name, owner))
        return out

    @unary
    def DescribePipeline(self, request: service_pb2.DescribePipelineRequest,
                         context: grpc.ServicerContext) -> service_pb2.DescribePipelineResponse:
        name = check_name(request.name)
        with self._lock:
            hosted = self._pipelines.get(name)
        if hosted is not None and hosted.ended is None:
            return service_pb2.DescribePipelineResponse(pipeline=hosted.info(self.address))
        owner = self.store.owner(name)
        if owner is None:
            raise NotFound(f"pipeline {name!r} does not exist")
        return service_pb2.DescribePipelineResponse(pipeline=_held_elsewhere(name, owner))

    @streaming
    def StreamBatches(self, request_iterator: Iterator[service_pb2.StreamBatchesRequest],
                      context: grpc.ServicerContext) -> Iterator[bytes]:
        first = next(request_iterator, None)
        if first is None or not first.name:
            raise InvalidArgument("StreamBatches: the first message must name the pipeline")
        hosted = self._local(first.name)
        hosted.attach(first.consumed)
        peer = context.peer()
        log.info("stream of %s started at batch %d for %s", hosted.name, first.consumed, peer,
                 extra={"pipeline": hosted.name, "batches": first.consumed, "peer": peer})
        self.metrics.active_streams.inc()
        acks = threading.Thread(target=self._read_acks, args=(request_iterator, hosted),
                                name=f"acks-{hosted.name}", daemon=True)
        acks.start()
        fields: dict[str, object] = {"pipeline": hosted.name, "peer": peer}
        try:
            yield from self._send(hosted, context)
        except ConveyorError as exc:
            fields["error"] = f"{exc.code}: {exc.message}"
            raise
        except Exception as exc:
            fields["error"] = f"INTERNAL: {type(exc).__name__}: {exc}"
            raise
        finally:
            hosted.detach()
            self.metrics.active_streams.dec()
            fields["batches"] = hosted.sent
            log.info("stream of %s ended after batch %d: %s", hosted.name, hosted.sent,
                     fields.get("error", "the client went away"), extra=fields)

    def _send(self, hosted: HostedPipeline,
              context: grpc.ServicerContext) -> Iterator[bytes]:
        """The frames of each batch, for as long as the client listens. The engine computes
        ``prefetch_queue_depth`` batches ahead on its workers while this thread sends, and
        frames are encoded one at a time as gRPC takes them: no thread hand-off per batch,
        and no encoded copy of a whole batch held in memory."""
        engine = hosted.engine
        samples = engine.batch_size
        try:
            while context.is_active():
                started = time.perf_counter()
                while True:  # waits in short steps: a drain or a fence is seen promptly
                    hosted.check_live()
                    if self.draining.is_set():
                        self._drain_stream(hosted)
                    if engine.next_ready(0.1):
                        break
                    if not context.is_active():
                        return
                try:
                    batch = engine.run()
                except DataFileError:
                    self.metrics.decode_errors.inc()
                    raise
                self.metrics.batch_latency.observe(time.perf_counter() - started)
                index = engine.batches_returned - 1
                size = 0
                for frame in encode_frames(index, batch):
                    size += len(frame)
                    yield frame
                del batch
                with hosted.cond:
                    hosted.sent = index + 1
                self.metrics.streamed(samples, size)
        except ConveyorError:
            hosted.check_live()  # a pipeline deleted or fenced under the stream says so
            raise

    @staticmethod
    def _read_acks(requests: Iterator[service_pb2.StreamBatchesRequest],
                   hosted: HostedPipeline) -> None:
        try:
            for request in requests:
                hosted.acknowledge(request.consumed)
        except Exception:  # the stream ended: nothing more to acknowledge
            return

    def _drain_stream(self, hosted: HostedPipeline) -> None:
        hosted.wait_acknowledged(self.drain_wait)
        error = Unavailable(f"server {self.address} is shutting down")
        try:
            stored = self._write_checkpoint(hosted, hosted.acknowledged)
        except Exception as exc:
            error.message += f"; no checkpoint could be written ({exc})"
        else:
            hosted.drain_checkpoint = stored.id
            log.info("drained %s at batch %d: %s", hosted.name, stored.batches, stored.id,
                     extra={"pipeline": hosted.name, "checkpoint_id": stored.id,
                            "batches": stored.batches})
            error.message += (f"; resume from checkpoint {stored.id} "
                              f"(after batch {stored.batches})")
            error.trailing_metadata = (  # type: ignore[attr-defined]
                (CHECKPOINT_ID_KEY, stored.id), (CHECKPOINT_BATCHES_KEY, str(stored.batches)))
        error.args = (error.message,)
        raise error

    def _write_checkpoint(self, hosted: HostedPipeline, batches: int) -> StoredCheckpoint:
        hosted.check_live()
        started = time.perf_counter()
        body = hosted.engine.checkpoint_body(batches)
        blob = ckpt.seal(body)
        try:
            stored = self.store.write_checkpoint(hosted.name, self.instance, hosted.generation,
                                                 blob, batches, self.address)
        except Fenced as exc:
            if hosted.end(exc.message):
                log.warning("checkpoint of %s refused: fenced (%s)", hosted.name, exc.message,
                            extra={"pipeline": hosted.name, "error": exc.message})
            raise
        self.metrics.checkpoint_latency.observe(time.perf_counter() - started)
        self.metrics.checkpoints_written.inc()
        hosted.latest_checkpoint = stored.id
        log.info("checkpoint %s of %s after batch %d (%d bytes)", stored.id, hosted.name,
                 batches, len(blob), extra={"pipeline": hosted.name, "checkpoint_id": stored.id,
                                            "batches": batches})
        return stored

    def _within_deadline(self, context: grpc.ServicerContext, what: str,
                         call: Callable[[], T]) -> T:
        """Run a Redis call so that the caller hears back before its deadline: a deadline
        shorter than the store's own timeout bounds the wait (the write may still land
        later, as one more retained checkpoint)."""
        remaining = context.time_remaining()
        if remaining is None or remaining > self.store.timeout + _DEADLINE_MARGIN:
            return call()
        future = self._store_calls.submit(call)
        try:
            return future.result(timeout=max(0.0, remaining - _DEADLINE_MARGIN))
        except FutureTimeout:
            raise Unavailable(f"Redis at {self.store.address} did not complete {what} within "
                              f"the caller's deadline ({remaining:.2f} s)") from None

    def checkpoint_at_acknowledged(self, hosted: HostedPipeline) -> StoredCheckpoint | None:
        """For the drain of a pipeline without a stream."""
        if not hosted.engine.spec.enable_checkpointing or hosted.ended is not None:
            return None
        stored = self._write_checkpoint(hosted, hosted.acknowledged)
        hosted.drain_checkpoint = stored.id
        return stored

    @unary
    def Checkpoint(self, request: service_pb2.CheckpointRequest,
                   context: grpc.ServicerContext) -> service_pb2.CheckpointResponse:
        hosted = self._local(request.name)
        batches = request.consumed if request.HasField("consumed") else hosted.acknowledged
        if batches > hosted.engine.batches_produced:
            raise FailedPrecondition(
                f"pipeline {hosted.name!r}: cannot checkpoint after {batches} consumed "
                f"batches: only {hosted.engine.batches_produced} were produced")
        stored = self._within_deadline(context, "the checkpoint",
                                       lambda: self._write_checkpoint(hosted, batches))
        return service_pb2.CheckpointResponse(checkpoint=checkpoint_info(stored),
                                              data=stored.blob)

    @unary
    def Restore(self, request: service_pb2.RestoreRequest,
                context: grpc.ServicerContext) -> service_pb2.RestoreResponse:
        started = time.perf_counter()
        name = check_name(request.name)
        source = request.WhichOneof("source")
        if source == "checkpoint_id":
            blob = self.store.read_checkpoint(request.checkpoint_id).blob or b""
        elif source == "data":
            blob = request.data
        else:
            raise InvalidArgument("Restore needs a checkpoint_id or checkpoint data")
        body = ckpt.open_blob(blob)
        if request.HasField("spec"):
            diff = specs.first_difference(body.spec, request.spec, "checkpoint", "given spec")
            if diff is not None:
                raise CheckpointMismatch(f"checkpoint was made by a different pipeline: "
                                              f"{diff}")
        self._check_capacity(name)
        engine = self._build(request.spec if request.HasField("spec") else None, blob)
        keep = request.keep_checkpoints or self.keep_checkpoints
        try:
            gen, previous = self.store.take_over(name, self.address, self.instance,
                                                 engine.fingerprint.hex(), keep)
        except BaseException:
            engine.close()
            raise
        hosted = HostedPipeline(name, engine, gen, keep, sent=body.batches,
                                acknowledged=body.batches)
        self._host(hosted)
        self.metrics.restore_latency.observe(time.perf_counter() - started)
        self.metrics.restores.inc()
        fields: dict[str, object] = {"pipeline": name, "batches": body.batches,
                                     "generation": gen}
        if source == "checkpoint_id":
            fields["checkpoint_id"] = request.checkpoint_id
        log.info("restored pipeline %s at batch %d from %s (generation %d, previous holder %s)",
                 name, body.batches, fields.get("checkpoint_id", "checkpoint data"), gen,
                 previous or "none", extra=fields)
        return service_pb2.RestoreResponse(pipeline=hosted.info(self.address),
                                           batches=body.batches)

    @unary
    def ListCheckpoints(self, request: service_pb2.ListCheckpointsRequest,
                        context: grpc.ServicerContext) -> service_pb2.ListCheckpointsResponse:
        name = check_name(request.name)
        found = self.store.list_checkpoints(name)
        if not found and self.store.owner(name) is None:
            raise NotFound(f"pipeline {name!r} does not exist and has no checkpoints")
        return service_pb2.ListCheckpointsResponse(
            checkpoints=[checkpoint_info(c) for c in found])

    @unary
    def GetCheckpoint(self, request: service_pb2.GetCheckpointRequest,
                      context: grpc.ServicerContext) -> service_pb2.GetCheckpointResponse:
        stored = self.store.read_checkpoint(request.id)
        ckpt.open_blob(stored.blob or b"")
        return service_pb2.GetCheckpointResponse(checkpoint=checkpoint_info(stored),
                                                 data=stored.blob)
