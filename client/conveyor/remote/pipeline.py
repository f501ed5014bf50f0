"""``RemotePipeline``: a pipeline on a server, consumed like the in-process engine.

``run()`` and iteration share one stream; a batch counts as consumed when they return it,
and ``checkpoint()`` records exactly that position. A stream starts at the consumed count
its first request names, so every batch's header index must equal the count so far: any
other raises ``DataLoss`` naming both, and that batch is neither returned nor
acknowledged.

**Failover.** With ``Client(failover=True)`` (the default) the pipeline follows its holder
and survives it: when its server stops answering, dies or drains, ``run()`` and
``checkpoint()`` resume the pipeline on another server of the client's from its newest
checkpoint at or before the trainer's own count, and go on where the trainer stands (the
index check above makes that exactly once); when another server holds it now, they follow
there. The trainer's loop never sees it; ``failovers`` counts it and the
``conveyor.client`` logger says it.

**Fan-in.** With ``workers`` other than 1 (``fan_out``), ``run()`` and iteration take the
batches from several servers at once (``fan_in.py``), the same sequence byte for byte;
the holder keeps the name, the lease and the checkpoints, and is told where the trainer
stands. With ``workers=1`` nothing of that runs.

**Epochs of external sources**, as the in-process ``Pipeline``: each batch's header says
whether it opens an external source's epoch (the engine's ``epoch_started``, a function
of the index, the same from any server or worker). ``run()`` holds that batch back and
raises StopIteration, and keeps raising it until ``reset()``; the next ``run()`` returns
the held batch. The held batch is not consumed (``consumed``, the acknowledgements and the
holder's position stay before it). A checkpoint taken after that StopIteration at the
position reached asks the server for the state past the epoch's end
(``CheckpointRequest.past_epoch_end``): restored, the pipeline starts the next epoch
without raising StopIteration again, as in process. ``run_on()`` goes on past such an
end (``reset()`` at once): the torch and TensorFlow datasets read the batches so.

**Data channel.** The stream asks for one (``data_channel.py``) unless the client turned it
off or the server's data port proved unreachable: the batches' bytes are then read from it
into each batch's buffer. A channel that cannot be attached makes the stream be opened
again without one; a broken one ends the stream as a broken gRPC stream does.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc

from conveyor import errors
from conveyor.remote import calls
from conveyor.remote.calls import Checkpoint
from conveyor.remote.cluster import Cluster
from conveyor.remote.fan_in import FanIn, check_workers
from conveyor.tensor_list import TensorList
from conveyor.transport.acknowledgements import ACK_FLUSH_S, Acknowledgements
from conveyor.transport.allocator import tune_client_process
from conveyor.transport.connection import error_of, wait_for_the_end
from conveyor.transport.data_channel import Attempt, DataSocket
from conveyor.transport.wire import BatchAssembler
from conveyor.v1 import service_pb2

log = logging.getLogger("conveyor.client")
Batch = tuple[TensorList, ...]
T = TypeVar("T")
#: Moves one call may make before it gives up and raises.
MAX_FAILOVERS = 3


class RemotePipeline:
    """A pipeline on a server, consumed like the in-process engine."""

    def __init__(self, client: Cluster, info: service_pb2.PipelineInfo, *,
                 consumed: int | None = None, via: str | None = None) -> None:
        #: The servers it was opened through (a ``conveyor.Client``, usually).
        self.client = client
        self.name = info.name
        self.info = info
        #: The server this object streams from and checkpoints on.
        self.via = via or client.target
        #: How often it moved to another server.
        self.failovers = 0
        self._consumed = info.acknowledged if consumed is None else consumed
        #: The name's claim this object's stream began under (later ones: its failovers).
        self._first_generation = info.generation
        self._acks: Acknowledgements | None = None
        self._responses: Any = None
        #: The stream's frames (its call, after a first frame read ahead) and data channel.
        self._frames: Iterator[bytes] | None = None
        self._data: DataSocket | None = None
        #: The data channel's attach under way, which ``close`` aborts.
        self._attempt: Attempt | None = None
        self._lock = threading.RLock()
        #: Set while ``close()`` ends the stream under a ``run()`` blocked on another thread.
        self._closing = threading.Event()
        #: The servers computing its batches, when it fans in (``fan_out``).
        self._fan_in: FanIn | None = None
        self._fan_target: int | None = 1
        #: Whether run() raises StopIteration (an external source's epoch ended) until
        #: ``reset()``; whether the batch opening the next epoch was met and is not yet
        #: returned; that batch, where the stream gave it (a fan-in keeps it as its next).
        self._stopped = False
        self._opening_met = False
        self._held: Batch | None = None
        client.adopt(self)
        if client.failover and info.HasField("spec") and not info.spec.enable_checkpointing:
            log.warning(
                "conveyor: pipeline %s was built without enable_checkpointing=True: it cannot "
                "fail over to another server or be fed by several (workers=); build it with "
                "@pipeline_def(..., enable_checkpointing=True) for that", self.name)

    @property
    def data_channel(self) -> bool:
        """Whether the stream receives its batches' bytes on a data channel now."""
        return self._data is not None

    @property
    def consumed(self) -> int:
        """Batches returned by ``run()`` and iteration, counted from the pipeline's start."""
        return self._consumed

    def _open(self) -> None:
        tune_client_process()
        self.client.learn_fleet()  # once a client: the servers it may fail over to
        conn = self.client.connection(self.via)
        want = conn.wants_data_channel
        self._acks = Acknowledgements(self.name, self._consumed, data_channel=want)
        self._responses = conn.stream(self._acks.requests(), self.client.stream_timeout)
        self._frames = self._responses
        if not want:
            return
        self._attempt = Attempt()
        attached = conn.attach(self._responses, self._attempt)
        if attached is None:  # unreachable: the same stream again, in frames alone
            self._close_stream()
            self._open()
            return
        self._frames, self._data = attached

    def _close_stream(self, flush: float = 0.0) -> None:
        """End the stream; ``flush``: seconds to wait for the last acknowledgement to go
        out first (a healthy stream being closed; a broken one has nothing to send on)."""
        if self._acks is not None:
            # (At interpreter exit gRPC's threads are stopped: nothing would be sent.)
            flush = 0.0 if sys.is_finalizing() else flush
            deadline = time.monotonic() + flush
            if self._acks.close(flush) and self._responses is not None:
                # The last count is on its way and the request side ended: the server ends
                # the call once it has taken the count. Cancelling before that could drop it.
                wait_for_the_end(self._responses, max(0.0, deadline - time.monotonic()))
        if self._responses is not None:
            self._responses.cancel()
        if self._data is not None:
            self._data.close()
        self._acks = self._responses = self._frames = self._data = self._attempt = None

    def build(self) -> None:
        """DALI's ``Pipeline.build()``: nothing to do, the server built the pipeline when it
        was opened (a DALI script's ``pipe.build()`` runs unchanged)."""

    def run(self) -> Batch:
        """The next batch; StopIteration before the batch that opens an external source's
        epoch, until ``reset()``."""
        with self._lock:
            if self._stopped:
                raise StopIteration
            if self._held is not None:  # the next epoch's first batch, held since then
                batch, self._held = self._held, None
                self._opening_met = False
                self._took()
                return batch
            if self._fan_in is not None:
                if self._fan_in.closed:  # closed before: its workers start again
                    self._fan_in = None
                    self.fan_out("auto" if self._fan_target is None else self._fan_target)
                assert self._fan_in is not None
                if not self._opening_met and self._fan_in.opens_source_epoch():
                    self._opening_met = self._stopped = True
                    raise StopIteration
                batch = self._fan_in.run()
                self._opening_met = False
                self._consumed = self._fan_in.consumed
                return batch
            batch, opens = self._with_failover(self._next_batch)
            if opens and not self._opening_met:
                self._held = batch
                self._opening_met = self._stopped = True
                raise StopIteration
            self._opening_met = False
            self._took()
            return batch

    def run_on(self) -> Batch:
        """The next batch, going on where an external source's epoch ends (``reset()``
        where ``run()`` raises StopIteration): the batches as one sequence that does not
        stop, as the torch and TensorFlow datasets read them."""
        with self._lock:
            try:
                return self.run()
            except StopIteration:
                self.reset()
                return self.run()

    def _took(self) -> None:
        """A batch of the stream is returned: it counts as consumed."""
        self._consumed += 1
        if self._acks is not None:
            self._acks.advance(self._consumed)

    def reset(self) -> None:
        """After StopIteration (an external source's epoch ended): start the next epoch;
        the next ``run()`` returns its first batch. Otherwise nothing, as DALI's."""
        with self._lock:
            self._stopped = False

    # -- fan-in ------------------------------------------------------------------------

    def fan_out(self, workers: int | str) -> RemotePipeline:
        """Take the batches from ``workers`` servers at once (a count, or ``"auto"``: every
        suitable server of the fleet, joining as they come); 1: from the holder's stream,
        as always. Returns this object."""
        count = check_workers(workers)
        if count == 1 or self._fan_in is not None:
            return self
        self._close_stream()
        if self._held is not None:  # the workers compute it again: their next batch
            self._held = None
        self._fan_target = count
        fan = FanIn(self, count)
        try:
            fan.start()
        except errors.CheckpointingDisabled as exc:
            exc.message = (f"workers={workers!r}: every worker starts from the pipeline's "
                           f"position, and {exc.message}")
            exc.args = (exc.message,)
            raise
        self._fan_in = fan
        return self

    @property
    def workers(self) -> list[str]:
        """The servers computing this pipeline's batches now."""
        return self._fan_in.addresses() if self._fan_in is not None else [self.via]

    @property
    def fan_in(self) -> FanIn | None:
        """The fan-in's scheduler (its counters: ``reruns``, ``mismatches``), if any."""
        return self._fan_in

    def position(self, consumed: int) -> bytes:
        """The pipeline's state after ``consumed`` batches, recorded nowhere (where
        workers start); the holder moves on to it (it fails over as ``checkpoint``)."""
        with self._lock:
            return self._with_failover(lambda: self.tell_holder(consumed))

    def tell_holder(self, consumed: int) -> bytes:
        """Tell the holder the trainer consumed ``consumed`` batches; its state there."""
        return calls.tell_position(self.client, self.name, consumed, via=self.via)

    def _next_batch(self) -> tuple[Batch, bool]:
        """The stream's next batch (not counted as consumed yet) and whether it opens an
        external source's epoch."""
        try:
            if self._responses is None:
                self._open()
            assert self._frames is not None
            # The stream starts where the first request said (this object's consumed
            # count), so every batch, the first one too, must be the next in order.
            assembler = BatchAssembler(self._consumed, f"the stream of {self.name!r}",
                                       self._data)
            for frame in self._frames:
                batch = assembler.feed(frame)
                if batch is not None:
                    break
            else:
                raise errors.Unavailable(f"the stream of {self.name!r} ended")
        except (grpc.RpcError, errors.ConveyorError) as exc:
            self._close_stream()
            if self._closing.is_set():
                raise errors.FailedPrecondition(
                    f"the stream of {self.name!r} was closed (close() on another thread) "
                    f"after {self._consumed} batches") from None
            if isinstance(exc, grpc.RpcError):
                raise error_of(exc) from None
            raise
        return batch, assembler.opens_source_epoch

    # -- failover ----------------------------------------------------------------------

    def _with_failover(self, call: Callable[[], T]) -> T:
        for attempt in range(MAX_FAILOVERS + 1):
            try:
                return call()
            except errors.ConveyorError as exc:
                if attempt == MAX_FAILOVERS or self._closing.is_set():
                    raise
                if not self.client.failover or not self._move(exc):
                    if isinstance(exc, errors.Unavailable):
                        self.client.say_where_it_failed(
                            exc, self.via, f"pipeline {self.name!r} after {self._consumed} "
                            "batches", failover=self.client.failover)
                    raise
        raise AssertionError("unreachable")

    def _move(self, exc: errors.ConveyorError) -> bool:
        """Put the pipeline where the stream can go on after ``exc``; False if ``exc`` is
        not a reason to move or no server can take it."""
        holder = self.client.reach(exc.metadata.get("holder", ""))
        if isinstance(exc, errors.FailedPrecondition) and holder and holder != self.via:
            if not self._same_job_generation(holder):
                return False  # a job's rank whose job went on without it: it stays fenced
            self._moved(holder, f"held there now ({exc.message})")  # follow the holder
            return True
        if not isinstance(exc, errors.Unavailable):
            return False
        self.client.learn_fleet(again=True, avoid=self.via)  # servers that joined since
        others = [a for a in self.client.servers() if a != self.via]
        for address in others:
            try:
                info, _ = calls.resume(self.client, self.name, self._consumed, via=address,
                                       checkpoints=self._own_checkpoints(address),
                                       run_id=self.info.run_id)
            except errors.ConveyorError as refused:
                log.info("conveyor: %s could not resume %s: %s", address, self.name,
                         refused.message)
                continue
            self.info = info
            self._moved(address, exc.message)
            return True
        return False

    def _own_checkpoints(self, address: str | None = None,
                         client: Cluster | None = None) -> list[service_pb2.CheckpointInfo]:
        """The pipeline's checkpoints to go on from: the name also keeps those of an older
        run, and a job's rank those of an older world of the job (past this one's start,
        perhaps), whose restore would make it that run's or be fenced. This stream's own
        when one is at or before its position, else all."""
        found = calls.list_checkpoints(client or self.client, self.name, via=address)
        if self.info.job.job:  # written since this rank's start (its start's included)
            own = [c for c in found if c.generation >= self._first_generation]
        else:
            own = [c for c in found if c.run_id == self.info.run_id]
        return own if any(c.batches <= self._consumed for c in own) else found

    def _same_job_generation(self, holder: str) -> bool:
        """Whether the pipeline at ``holder`` is still this object's: always, unless it is
        a job's rank, whose pipeline a newer generation of the job (another world size, a
        restart) took over: that one is not this trainer's to follow."""
        mine = self.info.job
        if not mine.job:
            return True
        try:
            now = calls.describe(self.client, self.name, via=holder).job
        except errors.ConveyorError:
            return False
        return now.generation == mine.generation

    def _moved(self, address: str, why: str) -> None:
        log.warning("conveyor: pipeline %s moved from %s to %s at batch %d: %s", self.name,
                    self.client.known_as(self.via), self.client.known_as(address),
                    self._consumed, why)
        self._close_stream()
        self.via = address
        self.failovers += 1

    # -- the rest ----------------------------------------------------------------------

    def __iter__(self) -> Iterator[Batch]:
        """The batches, up to the end of an external source's epoch (StopIteration):
        after ``reset()``, iterating again gives the next epoch's."""
        while True:
            try:
                batch = self.run()
            except StopIteration:
                return
            yield batch

    def checkpoint(self, consumed: int | None = None) -> Checkpoint:
        """The position after the batches this object has returned, stored in Redis; or
        after the first ``consumed`` of them (an iterator holding a batch it has not handed
        out checkpoints before it). Taken after StopIteration (before or after ``reset()``)
        at the position reached, it resumes at the next epoch's start without raising it
        again; taken after an epoch's last batch, before the StopIteration, it raises it
        first (as the in-process pipeline's)."""
        if consumed is not None and not 0 <= consumed <= self._consumed:
            raise errors.InvalidArgument(
                f"checkpoint of {self.name!r}: consumed={consumed} is not between 0 and the "
                f"{self._consumed} batches returned")
        with self._lock:
            at = self._consumed if consumed is None else consumed
            past = self._opening_met and at == self._consumed
            if self._fan_in is not None:  # the holder first moves on to the position
                return self._with_failover(lambda: self._fanned_in_checkpoint(at, past))
            return self._with_failover(lambda: calls.checkpoint(
                self.client, self.name, at, via=self.via, past_epoch_end=past))

    def _fanned_in_checkpoint(self, consumed: int, past_epoch_end: bool) -> Checkpoint:
        self.tell_holder(consumed)
        return calls.checkpoint(self.client, self.name, consumed, via=self.via,
                                past_epoch_end=past_epoch_end)

    def describe(self) -> service_pb2.PipelineInfo:
        return calls.describe(self.client, self.name, via=self.via)

    def resume(self, on: Cluster | None = None) -> RemotePipeline:
        """After this pipeline's server drained or died: host it on ``on`` (another
        server; by default this object's) at the position this trainer consumed, and go
        on from there (``Client.resume``). This object is closed."""
        self.close()
        client = on or self.client
        info, via = calls.resume(client, self.name, self._consumed,
                                 checkpoints=self._own_checkpoints(client=client),
                                 run_id=self.info.run_id)
        return RemotePipeline(client, info, consumed=self._consumed, via=via)

    def close(self) -> None:
        """End the stream (the pipeline goes on on its server; ``run()`` would open a new
        stream). A ``run()`` blocked on another thread ends at once, with
        FailedPrecondition. A fan-in's calls are cancelled."""
        if self._fan_in is not None:
            self._fan_in.close()
        if self._lock.acquire(blocking=False):
            try:
                self._close_stream(ACK_FLUSH_S)  # nothing to wait for without a stream
            finally:
                self._lock.release()
            return
        self._closing.set()  # a run() holds the lock: end its stream under it
        try:
            while not self._lock.acquire(timeout=0.05):
                responses, data = self._responses, self._data  # (it may be opening one)
                attempt = self._attempt
                if responses is not None:
                    responses.cancel()
                if attempt is not None:
                    attempt.abort()
                if data is not None:
                    data.abort()
            try:
                self._close_stream()
            finally:
                self._lock.release()
        finally:
            self._closing.clear()

    def __enter__(self) -> RemotePipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
