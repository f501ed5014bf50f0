"""StreamBatches: one consumer's stream of a hosted pipeline's batches.

The first request names the pipeline and the consumer's position; later requests
acknowledge what it consumed (read on a thread of their own). The send loop takes each
batch from the engine, which computes ``prefetch_queue_depth`` batches ahead on its
workers, and encodes its frames one at a time as gRPC takes them: no thread hand-off per
batch, and no encoded copy of a whole batch held in memory. A GPU pipeline's batch is
encoded straight from the pinned buffer its outputs were copied into, which is given back
once its frames are sent. On a drain the stream
checkpoints at the acknowledged position and ends with UNAVAILABLE carrying that
checkpoint in trailing metadata.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import grpc

from conveyor.errors import ConveyorError, DataFileError, Draining
from conveyor.transport.channel import CHECKPOINT_BATCHES_KEY, CHECKPOINT_ID_KEY
from conveyor.transport.wire import FRAME_BYTES
from conveyor.v1 import service_pb2
from conveyor_server.engine.pipeline import Batch, Pipeline
from conveyor_server.service.checkpoints import CheckpointWriter
from conveyor_server.service.data_port import DataPort, DataSink, send_batch
from conveyor_server.service.hosted import HostedPipeline, HostedPipelines
from conveyor_server.service.observer import ServiceObserver
from conveyor_server.service.stream_slots import StreamSlots, first_request

log = logging.getLogger("conveyor.server")
#: How often a stream waiting for the engine looks for a drain, a fence or a gone client.
POLL_S = 0.1

Requests = Iterator[service_pb2.StreamBatchesRequest]
Release = Callable[[], None]


class BatchStreams:
    def __init__(self, pipelines: HostedPipelines, checkpoints: CheckpointWriter,
                 observer: ServiceObserver, address: str, drain_wait: float,
                 slots: StreamSlots) -> None:
        self._pipelines = pipelines
        self._checkpoints = checkpoints
        self._observer = observer
        self._address = address
        self._drain_wait = drain_wait
        self.slots = slots
        self.draining = threading.Event()
        #: Refuses a caller that may not stream the named pipeline (set by the servicer).
        self.authorize: Callable[[grpc.ServicerContext, str], object] = \
            lambda context, name: None
        #: Where data channels attach; None: the server has no data port.
        self.data_port: DataPort | None = None

    def serve(self, requests: Requests, context: grpc.ServicerContext) -> Iterator[bytes]:
        with self.slots.slot():
            yield from self._serve(requests, context)

    def _serve(self, requests: Requests, context: grpc.ServicerContext) -> Iterator[bytes]:
        first = first_request(requests, context, self.slots.first_message_s)
        self.authorize(context, first.name)
        hosted = self._pipelines.local(first.name)
        token = hosted.attach(first.consumed)
        peer = context.peer()
        log.info("stream of %s started at batch %d for %s", hosted.name, first.consumed, peer,
                 extra={"pipeline": hosted.name, "batches": first.consumed, "peer": peer})
        self._observer.stream_opened()
        acks = AckReader(requests, hosted, token, context)
        acks.start()
        fields: dict[str, object] = {"pipeline": hosted.name, "peer": peer}
        sink: DataSink | None = None
        try:
            if first.data_channel and self.data_port is not None:
                sink = yield from self.data_port.offer(context,
                                                       service_pb2.StreamBatchesResponse)
                if sink is not None:
                    fields["data_channel"] = True
                elif not context.is_active():
                    return
            yield from self._send(hosted, context, token, acks, sink)
        except ConveyorError as exc:
            fields["error"] = f"{exc.code}: {exc.message}"
            raise
        except Exception as exc:
            fields["error"] = f"INTERNAL: {type(exc).__name__}: {exc}"
            raise
        finally:
            if sink is not None:
                sink.close()
            hosted.detach(token)
            self._observer.stream_closed()
            fields["batches"] = hosted.sent
            log.info("stream of %s ended after batch %d: %s", hosted.name, hosted.sent,
                     fields.get("error", "the client went away"), extra=fields)

    def _send(self, hosted: HostedPipeline, context: grpc.ServicerContext,
              token: int, acks: AckReader, sink: DataSink | None) -> Iterator[bytes]:
        """The frames of each batch, for as long as the client listens and no newer stream
        took over; with ``sink``, each batch's header frame, then its bytes on the sink."""
        try:
            while context.is_active():
                started = time.perf_counter()
                taken = self._next_batch(hosted, context, token, acks)
                if taken is None:
                    return
                index, batch, release, opens = taken
                samples = len(batch[0]) if batch else 0
                waited = time.perf_counter() - started
                self._observer.batch_waited(waited)
                try:  # a GPU batch's frames are encoded from its output-ring slot
                    size = yield from send_batch(sink, index, batch, FRAME_BYTES,
                                                 opens_source_epoch=opens)
                finally:
                    del batch
                    release()
                if size is None:  # the call ended under the batch's bytes
                    return
                hosted.record_sent(token, index + 1)
                self._observer.batch_streamed(samples, size)
                self._observer.pipeline_streamed(hosted.name, samples, waited)
        except ConveyorError:
            hosted.check_live()  # a pipeline deleted or fenced under the stream says so
            raise

    def _next_batch(self, hosted: HostedPipeline, context: grpc.ServicerContext,
                    token: int, acks: AckReader
                    ) -> tuple[int, Batch, Release, bool] | None:
        """The engine's next batch, its index, the call that frees its bytes (a GPU
        batch's output-ring slot) and whether it opens an external source's epoch (the
        consumer then raises StopIteration before it, as the in-process pipeline),
        waiting in short steps so that a drain, a fence, a newer consumer or a malformed
        acknowledgement is seen promptly; None when the client went away."""
        engine = hosted.engine
        while True:
            if acks.error is not None:
                raise acks.error
            hosted.check_live()
            hosted.check_consumer(token)
            if self.draining.is_set():
                self._drain(hosted)
            with hosted.engine_lock:
                hosted.check_consumer(token)
                if engine.next_ready(POLL_S):
                    failed = engine.samples_skipped, engine.samples_replaced
                    try:
                        batch, release = engine.run_staged()
                    except DataFileError:
                        self._observer.decode_error()
                        raise
                    self._count_failed(failed, engine)
                    return (engine.batches_returned - 1, batch, release,
                            engine.epoch_started)
            if not context.is_active():
                return None

    def _count_failed(self, before: tuple[int, int], engine: Pipeline) -> None:
        for policy, then, now in (("skip", before[0], engine.samples_skipped),
                                  ("replace", before[1], engine.samples_replaced)):
            if now > then:
                self._observer.samples_failed(policy, now - then)

    def checkpoint_streaming(self) -> None:
        """At the start of a drain: checkpoint every streaming pipeline at its acknowledged
        position once its consumer acknowledged what was sent (or after the drain wait),
        apart from its stream, which may be blocked on flow control; the stream then ends
        with that checkpoint's id as soon as it can send again."""
        for hosted in self._pipelines.all():
            if hosted.streaming:
                threading.Thread(target=self._checkpoint_for_drain, args=(hosted,),
                                 name=f"drain-{hosted.name}", daemon=True).start()

    def _checkpoint_for_drain(self, hosted: HostedPipeline) -> None:
        hosted.wait_acknowledged(self._drain_wait)
        try:
            self._checkpoints.for_drain(hosted)
        except ConveyorError as exc:
            log.warning("could not checkpoint %s while draining: %s", hosted.name, exc.message,
                        extra={"pipeline": hosted.name, "error": exc.message})

    def _drain(self, hosted: HostedPipeline) -> None:
        """End the stream for a drain: checkpoint at what the consumer acknowledged (after
        waiting a while for it to acknowledge what was sent) and raise UNAVAILABLE naming
        that checkpoint."""
        hosted.wait_acknowledged(self._drain_wait)
        error = Draining(f"server {self._address} is shutting down")
        try:
            stored = self._checkpoints.for_drain(hosted)
        except Exception as exc:
            error.message += f"; no checkpoint could be written ({exc})"
        else:
            if stored is None:
                error.message += "; no checkpoint (checkpointing is off or the pipeline ended)"
                error.args = (error.message,)
                raise error
            log.info("drained %s at batch %d: %s", hosted.name, stored.batches, stored.id,
                     extra={"pipeline": hosted.name, "checkpoint_id": stored.id,
                            "batches": stored.batches})
            error.message += (f"; resume from checkpoint {stored.id} "
                              f"(after batch {stored.batches})")
            error.metadata.update(checkpoint_id=stored.id,
                                  checkpoint_batches=str(stored.batches))
            error.trailing_metadata = (  # type: ignore[attr-defined]
                (CHECKPOINT_ID_KEY, stored.id), (CHECKPOINT_BATCHES_KEY, str(stored.batches)))
        error.args = (error.message,)
        raise error


class AckReader(threading.Thread):
    """Reads the consumer's acknowledgements on a thread of its own. A malformed one is
    kept in ``error``, and the stream ends with it (INVALID_ARGUMENT).

    A consumer that closes its stream sends its last count and then ends its requests (a
    half-close): once that count is taken, the call is ended here (``context.cancel()``, so
    also while the send loop waits on flow control), and the consumer, which waits for its
    call to end before cancelling it, knows its last count arrived."""

    def __init__(self, requests: Requests, hosted: HostedPipeline, token: int,
                 context: grpc.ServicerContext) -> None:
        super().__init__(name=f"acks-{hosted.name}", daemon=True)
        self._requests = requests
        self._hosted = hosted
        self._token = token
        self._context = context
        self.error: ConveyorError | None = None

    def run(self) -> None:
        try:
            for request in self._requests:
                self._hosted.acknowledge(request.consumed, self._token)
        except ConveyorError as exc:
            self.error = exc
            return
        except Exception:  # the stream ended: nothing more to acknowledge
            return
        # The requests also end when the call itself ended (the send loop's error is its
        # status): a cancel then could reach the client before that status, as CANCELLED.
        if self._context.is_active():
            self._context.cancel()  # the consumer is done: its last count is in
