"""ComputeBatches: this server computes batches of a pipeline held elsewhere (fan-in).

A trainer fed by several servers asks each of them for ranges of its pipeline's batch
indices; every batch is a pure function of its index, so any server computes the same
bytes for it. The first request names the pipeline and a sealed checkpoint blob of it (the
position the holder answered); the caller must be allowed to stream the pipeline
(``access.py``), the blob's spec must be the one Redis records for the name (a caller
cannot have a spec of its own computed under a name it may stream), and the engine is
built from the blob as a restore builds it: the behaviour of every operator and the data of
every reader are verified, and an external source must be configured here.

Later requests ask for ranges and cancel indices. The send loop takes the asked indices in
the order asked; the engine seeks (O(1)) only when the next asked index is not the next it
produces, and computes ahead only within the run of consecutive indices asked, so no work
is wasted on batches another worker computes. At most ``MAX_ASKED`` indices may wait at a
time; the engine holds at most its ``prefetch_queue_depth`` batches, and gRPC's flow control
bounds the bytes in transit. Each call holds one of the server's stream slots
(``limits.max_streams``) and computes on the server's shared workers, so the fleet record
counts it in ``streams`` and ``busy``. A draining server ends its calls with UNAVAILABLE at
once: the trainer gives their indices to other workers. Nothing here writes to Redis: the
pipeline's name, lease and checkpoints stay its holder's. A call whose start asks for a
data channel gets the offer once its engine is built (``data_port.py``); once attached,
each batch goes as its header frame, its bytes on the channel.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator

import grpc

from conveyor.definition import spec as specs
from conveyor.errors import (
    ConveyorError,
    Draining,
    InvalidArgument,
    NotFound,
    SpecMismatch,
)
from conveyor.v1 import service_pb2
from conveyor_server.engine.admission.limits import EngineLimits
from conveyor_server.engine.identity import checkpoint as ckpt
from conveyor_server.engine.pipeline import Pipeline
from conveyor_server.service.access import Access
from conveyor_server.service.data_port import DataPort, DataSink, send_batch
from conveyor_server.service.stream_slots import StreamSlots
from conveyor_server.store.ids import check_name
from conveyor_server.store.store import Store

log = logging.getLogger("conveyor.server")
#: How often the send loop looks for a drain, a cancellation or a gone caller (seconds).
POLL_S = 0.1
#: The most batch indices one call may have asked and not yet received.
MAX_ASKED = 256
#: Bytes per frame: larger than a stream's, so a trainer reading several workers spends
#: less per byte on frames (well within the channel's message limit).
FRAME_BYTES = 4 << 20

Requests = Iterator[service_pb2.ComputeBatchesRequest]
Build = Callable[[bytes], Pipeline]


class Asked:
    """The indices a call asked for, in order, and the ones it cancelled; filled by the
    request reader (a thread of its own), emptied by the send loop."""

    def __init__(self, start: int) -> None:
        self.start = start
        self.cond = threading.Condition()
        self.queue: deque[int] = deque()
        self.cancelled: set[int] = set()
        self.ended = False
        self.error: ConveyorError | None = None

    def add(self, request: service_pb2.ComputeBatchesRequest) -> None:
        kind = request.WhichOneof("request")
        with self.cond:
            if kind == "compute":
                first, count = request.compute.first, request.compute.count
                if count == 0:
                    raise InvalidArgument("ComputeBatches: compute.count must be at least 1")
                if first < self.start:
                    raise InvalidArgument(
                        f"ComputeBatches: batch {first} is before the position this call "
                        f"started from ({self.start}): start a call from an earlier position")
                if len(self.queue) + count > MAX_ASKED:
                    raise InvalidArgument(
                        f"ComputeBatches: compute.count {count} would leave more than "
                        f"{MAX_ASKED} batches asked and not received; ask for fewer at a time")
                self.queue.extend(range(first, first + count))
            elif kind == "cancel":
                if request.cancel in self.queue:
                    self.queue.remove(request.cancel)
                else:
                    self.cancelled.add(request.cancel)  # being computed: not sent
            else:
                raise InvalidArgument("ComputeBatches: only the first request may be a start; "
                                      "later ones are compute or cancel")
            self.cond.notify_all()

    def take(self, timeout: float) -> tuple[int, int] | None:
        """The next index asked and the end of the run of consecutive indices asked from it
        (the engine computes ahead up to there); None if none came within ``timeout``."""
        with self.cond:
            if not self.queue:
                self.cond.wait(timeout)
            if not self.queue:
                return None
            index = self.queue.popleft()
            self.cancelled.discard(index)
            end = index + 1
            for following in self.queue:
                if following != end:
                    break
                end += 1
            return index, end

    def drop(self, index: int) -> bool:
        """Whether ``index`` was cancelled since it was taken (it is then not sent)."""
        with self.cond:
            if index in self.cancelled:
                self.cancelled.discard(index)
                return True
            return False


class RequestReader(threading.Thread):
    """Reads a call's later requests into ``Asked``; a malformed one is kept in
    ``asked.error`` and the call ends with it."""

    def __init__(self, requests: Requests, asked: Asked, name: str) -> None:
        super().__init__(name=f"compute-{name}", daemon=True)
        self._requests = requests
        self._asked = asked

    def run(self) -> None:
        try:
            for request in self._requests:
                self._asked.add(request)
        except ConveyorError as exc:
            self._asked.error = exc
        except Exception:  # the call ended
            pass
        with self._asked.cond:
            self._asked.ended = True
            self._asked.cond.notify_all()


class ComputeCalls:
    def __init__(self, store: Store, access: Access, build: Build, slots: StreamSlots,
                 draining: threading.Event, address: str, limits: EngineLimits) -> None:
        self._store = store
        self._access = access
        self._build = build
        self._slots = slots
        self._draining = draining
        self._address = address
        self._limits = limits
        #: Where data channels attach; None: the server has no data port.
        self.data_port: DataPort | None = None

    def serve(self, requests: Requests, context: grpc.ServicerContext) -> Iterator[bytes]:
        with self._slots.slot():
            yield from self._serve(requests, context)

    def _serve(self, requests: Requests, context: grpc.ServicerContext) -> Iterator[bytes]:
        start = self._first(requests, context)
        name = check_name(start.name)
        self._access.require(context, name, "stream")
        engine = self._engine(name, start.checkpoint)
        peer = context.peer()
        sent = [0]
        sink: DataSink | None = None
        try:
            asked = Asked(engine.start_batches)
            RequestReader(requests, asked, name).start()
            log.info("computing batches of %s for %s from batch %d", name, peer,
                     engine.start_batches,
                     extra={"pipeline": name, "peer": peer, "batches": engine.start_batches})
            if start.data_channel and self.data_port is not None:
                sink = yield from self.data_port.offer(context,
                                                       service_pb2.ComputeBatchesResponse)
                if sink is None and not context.is_active():
                    return
            yield from self._send(engine, asked, context, sent, sink)
        finally:
            if sink is not None:
                sink.close()
            engine.close()
            log.info("computed %d batches of %s for %s", sent[0], name, peer,
                     extra={"pipeline": name, "peer": peer, "batches": sent[0]})

    def _first(self, requests: Requests,
               context: grpc.ServicerContext) -> service_pb2.ComputeStart:
        def give_up() -> None:
            log.warning("a ComputeBatches call from %s sent no start within %.0f s: "
                        "cancelled", context.peer(), self._slots.first_message_s,
                        extra={"peer": context.peer()})
            context.cancel()

        timer = threading.Timer(self._slots.first_message_s, give_up)
        timer.daemon = True
        timer.start()
        try:
            first = next(requests, None)
        finally:
            timer.cancel()
        if first is None or first.WhichOneof("request") != "start" or not first.start.name:
            raise InvalidArgument("ComputeBatches: the first request must be a start naming "
                                  "the pipeline (start.name) with its position "
                                  "(start.checkpoint)")
        return first.start

    def _engine(self, name: str, blob: bytes) -> Pipeline:
        """The engine for ``name`` at the blob's position, once the blob's spec is the one
        Redis records for the name."""
        owner = self._store.owner(name)
        if owner is None:
            raise NotFound(f"pipeline {name!r} does not exist: there is nothing to compute "
                           "for it (create or restore it first)", pipeline=name)
        if self._limits.spec is not None:
            self._limits.spec.check_checkpoint(blob)
        body = ckpt.open_blob(blob)
        given = specs.fingerprint(body.spec).hex()
        if given != owner.fingerprint:
            raise SpecMismatch(
                f"ComputeBatches: start.checkpoint holds another spec (fingerprint "
                f"{given[:12]}...) than pipeline {name!r} (fingerprint "
                f"{owner.fingerprint[:12]}...): ask the pipeline's holder ({owner.holder}) "
                "for its position (Checkpoint with position_only) and start from that",
                pipeline=name)
        return self._build(blob)

    def _send(self, engine: Pipeline, asked: Asked, context: grpc.ServicerContext,
              sent: list[int], sink: DataSink | None) -> Iterator[bytes]:
        """Each asked batch's frames, in the order asked, encoded as gRPC takes them (with
        ``sink``: its header frame, its bytes on the sink); ``sent[0]`` counts the
        batches."""
        while context.is_active():
            self._check(asked)
            taken = asked.take(POLL_S)
            if taken is None:
                self._check(asked)
                if asked.ended:
                    return  # the caller half-closed and everything asked was sent
                continue
            index, end = taken
            if engine.batches_returned != index:
                engine.seek(index)
            engine.produce_until = end
            while not engine.next_ready(POLL_S):
                self._check(asked)
                if not context.is_active():
                    return
            batch, release = engine.run_staged()
            opens = engine.epoch_started  # a function of the index: the same on any server
            try:  # a GPU batch's frames are encoded from its output-ring slot
                if not asked.drop(index):
                    if (yield from send_batch(sink, index, batch, FRAME_BYTES,
                                              opens_source_epoch=opens)) is None:
                        return  # the call ended under the batch's bytes
                    sent[0] += 1
            finally:
                del batch
                release()

    def _check(self, asked: Asked) -> None:
        if asked.error is not None:
            raise asked.error
        if self._draining.is_set():
            raise Draining(f"server {self._address} is shutting down: the batches asked of "
                           "it go to other servers")
