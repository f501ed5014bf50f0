"""The pipelines this server hosts: each one's engine, counters and single consumer
(``HostedPipeline``), and the set of them by name (``HostedPipelines``).

Counters, all counted from the pipeline's start: ``produced`` (computed by the engine,
prefetch included) >= ``sent`` (written to the stream) >= ``acknowledged`` (the consumer
said it consumed them). A new stream starts where its consumer says it stands, so no batch
sent ahead is lost when a stream breaks.

One consumer at a time: a new stream at a valid position takes over from the current one
(a trainer that reconnected wins over its own stale stream), which ends ABORTED. Each
stream holds a token; only the stream holding the newest one touches the engine (under
``engine_lock``) or moves the counters.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from conveyor.errors import (
    Aborted,
    ConveyorError,
    FailedPrecondition,
    Fenced,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
)
from conveyor.v1 import service_pb2
from conveyor_server.engine.pipeline import Pipeline
from conveyor_server.service.jobs import share_message
from conveyor_server.store.ids import check_name
from conveyor_server.store.records import ANONYMOUS
from conveyor_server.store.store import Store, StoredCheckpoint

log = logging.getLogger("conveyor.server")


@dataclass
class HostedPipeline:
    name: str
    engine: Pipeline
    generation: int
    keep: int
    sent: int = 0
    acknowledged: int = 0
    streaming: bool = False
    #: Why this server may no longer serve the pipeline (fenced, deleted), if so.
    ended: str | None = None
    ended_error: type[ConveyorError] = Fenced
    ended_metadata: dict[str, str] = field(default_factory=dict)
    latest_checkpoint: str = ""
    #: The checkpoint written when this server drained the pipeline, if any, and the lock
    #: that lets the stream and the drain write it once per position.
    drained: StoredCheckpoint | None = None
    drain_lock: threading.Lock = field(default_factory=threading.Lock)
    #: Set by this server's own delete before it releases the name, so the fencing
    #: watcher does not take the released name for someone else's doing.
    deleting: bool = False
    cond: threading.Condition = field(default_factory=threading.Condition)
    #: When this server's lease on the name runs out (``time.monotonic()``), unless renewed:
    #: past it the pipeline is not served (no zombie streams during a Redis partition).
    lease_until: float = math.inf
    #: The token of the newest consumer stream; older streams end ABORTED.
    consumer: int = 0
    #: Held by the stream around its engine calls, and by ``attach`` to move the engine.
    engine_lock: threading.Lock = field(default_factory=threading.Lock)
    #: The identity that created the pipeline: who may use it besides operators (access.py).
    creator: str = ANONYMOUS
    #: The training run consuming the pipeline ("" if none was named).
    run_id: str = ""
    #: Since when (``time.monotonic()``) no consumer stream is attached; None while one is.
    idle_since: float | None = field(default_factory=time.monotonic)

    def idle_seconds(self, now: float | None = None) -> float | None:
        """Seconds without a consumer stream; None while one is attached."""
        since = self.idle_since
        return None if since is None else max(0.0, (now or time.monotonic()) - since)

    def attach(self, start: int) -> int:
        """Become this pipeline's consumer, starting after ``start`` consumed batches; a
        current stream is taken over (it ends ABORTED). Returns the new stream's token."""
        with self.cond:
            self.check_live()
            self._check_start(start)
            took_over = self.streaming
            self.consumer += 1
            token = self.consumer
            self.cond.notify_all()
        if took_over:
            log.info("stream of %s taken over by a newer consumer at batch %d", self.name,
                     start, extra={"pipeline": self.name, "batches": start})
        # Holding the engine lock: the previous stream is out of the engine.
        with self.engine_lock, self.cond:
            self.check_consumer(token)
            self.check_live()
            if start != self.engine.batches_returned:
                try:
                    self.engine.seek(start)
                except (ValueError, OverflowError):
                    raise InvalidArgument(f"pipeline {self.name!r}: batch {start} is out of "
                                          "range") from None
            self.sent = self.acknowledged = start
            self.streaming = True
            self.idle_since = None
        return token

    def position(self, consumed: int) -> bytes:
        """The state after ``consumed`` batches, recorded nowhere (the position a fan-in's
        workers start from). The trainer took its batches from workers, so a pipeline
        with no stream attached moves on to ``consumed`` (never back): its recorded
        checkpoints, drain and description follow the trainer."""
        with self.engine_lock, self.cond:
            self.check_live()
            if not self.streaming and consumed > self.engine.batches_produced:
                try:
                    self.engine.seek(consumed)
                except (ValueError, OverflowError):
                    raise InvalidArgument(f"pipeline {self.name!r}: batch {consumed} is out "
                                          "of range") from None
            if not self.streaming and consumed > self.acknowledged:
                self.sent = self.acknowledged = consumed
                self.cond.notify_all()
            if not self.streaming:  # a fan-in's trainer consumes it through its workers
                self.idle_since = time.monotonic()
            produced = self.engine.batches_produced
            if consumed > produced:
                raise FailedPrecondition(
                    f"pipeline {self.name!r}: no position after {consumed} batches: only "
                    f"{produced} were produced, and a stream is attached")
            return self.engine.checkpoint(batches=consumed)

    def check_consumer(self, token: int) -> None:
        """Aborted if a newer stream took over from the one holding ``token``."""
        if token != self.consumer:
            raise Aborted(f"pipeline {self.name!r}: a newer consumer took over the stream "
                          f"(this one ends; the newer one goes on from its own position)")

    def _check_start(self, start: int) -> None:
        """FailedPrecondition unless ``start`` is a position this server can stream from.
        A consumer ahead of a freshly restored pipeline (one that kept consuming what a
        draining server had sent after its checkpoint) starts after what it has: the
        engine jumps there in O(1)."""
        lowest = self.engine.start_batches
        if start < lowest:
            raise FailedPrecondition(
                f"pipeline {self.name!r}: cannot stream from batch {start}: this server "
                f"holds it from batch {lowest} on")
        produced = self.engine.batches_produced
        if start > produced and produced != lowest:
            raise FailedPrecondition(
                f"pipeline {self.name!r}: cannot stream from batch {start}: only "
                f"{produced} were produced")

    def detach(self, token: int) -> None:
        with self.cond:
            if token == self.consumer:
                self.streaming = False
                self.idle_since = time.monotonic()
            self.cond.notify_all()

    def record_sent(self, token: int, sent: int) -> None:
        with self.cond:
            if token == self.consumer:
                self.sent = sent

    def acknowledge(self, consumed: int, token: int) -> None:
        with self.cond:
            if token != self.consumer:
                return  # a stream that was taken over
            # Clamped to the batches taken from the engine, not to ``sent``: an ack may
            # overtake the bookkeeping of the batch it acknowledges.
            if consumed > self.acknowledged:
                self.acknowledged = min(consumed, self.engine.batches_returned)
                self.cond.notify_all()

    def check_live(self) -> None:
        if self.ended is not None:
            raise self.ended_error(self.ended, **self.ended_metadata)
        late = time.monotonic() - self.lease_until
        if late > 0:
            raise Unavailable(f"this server's lease on pipeline {self.name!r} ran out "
                              f"{late:.1f} s ago (Redis unreachable): it stops serving it "
                              "until it can renew; restore it on another server")

    def end(self, reason: str, error: type[ConveyorError] = Fenced, **metadata: str) -> bool:
        """End the pipeline here for ``reason`` (later calls raise ``error`` with
        ``metadata``); True if this call ended it."""
        with self.cond:
            first = self.ended is None
            if first:
                self.ended, self.ended_error = reason, error
                self.ended_metadata = dict(metadata)
            self.cond.notify_all()
        return first

    def close(self) -> None:
        """Close the engine once no stream is inside it: a stream holds ``engine_lock``
        only around one wait of ``POLL_S`` and the hand-over of a computed batch, so this
        waits that long at most, and a stream that comes after sees the engine closed (and
        this pipeline's end, which the caller sets first)."""
        with self.engine_lock:
            self.engine.close()

    def wait_acknowledged(self, timeout: float) -> None:
        """Wait until the consumer acknowledged every batch sent (or ``timeout``)."""
        with self.cond:
            self.cond.wait_for(lambda: self.acknowledged >= self.sent, timeout)

    def info(self, holder: str, include_spec: bool = True) -> service_pb2.PipelineInfo:
        info = service_pb2.PipelineInfo(
            name=self.name, holder=holder, generation=self.generation,
            fingerprint=self.engine.fingerprint.hex(), produced=self.engine.batches_produced,
            sent=self.sent, acknowledged=self.acknowledged, streaming=self.streaming,
            latest_checkpoint=self.latest_checkpoint,
            samples_skipped=self.engine.samples_skipped,
            samples_replaced=self.engine.samples_replaced, run_id=self.run_id)
        if include_spec:
            info.spec.CopyFrom(self.engine.spec)
        if self.engine.share.job:
            info.job.CopyFrom(share_message(self.engine.share))
        info.epoch_sizes.update(self.engine.epoch_sizes())
        idle = self.idle_seconds()
        if idle is not None:
            info.idle_s = idle
        return info


def _nothing() -> None:
    return None


def full_message(hosted: list[HostedPipeline], limit: int, idle_release_s: float) -> str:
    """Why a full server refuses one more pipeline, naming its idle pipelines (longest idle
    first) and what to do."""
    now = time.monotonic()
    idle = sorted(((h.idle_seconds(now), h.name) for h in hosted
                   if h.idle_seconds(now) is not None), reverse=True)
    named = ", ".join(f"{name!r} ({seconds:.0f} s)" for seconds, name in idle[:5])
    more = f" and {len(idle) - 5} more" if len(idle) > 5 else ""
    if idle:
        what = f"{len(idle)} of them have no consumer: {named}{more}"
    else:
        what = "every one has a consumer"
    release = (f"this server releases a pipeline after {idle_release_s:g} s without a "
               "consumer (limits.idle_release_s), keeping its checkpoints"
               if idle_release_s > 0 else "idle pipelines are never released here "
               "(limits.idle_release_s = 0)")
    return (f"this server hosts {len(hosted)} pipelines, its limit (limits.max_pipelines = "
            f"{limit}); {what}. Delete one that is done (`conveyor delete NAME`; "
            f"--keep-checkpoints to resume it later), open the pipeline through another "
            f"server, or raise limits.max_pipelines; {release}")


class HostedPipelines:
    """The pipelines this server hosts, by name, with the server's capacity limit.

    A name that is not hosted here is looked up in Redis so the refusal says where the
    pipeline lives.
    """

    def __init__(self, store: Store, address: str, max_pipelines: int) -> None:
        self._store = store
        self._address = address
        self._max = max_pipelines
        self._by_name: dict[str, HostedPipeline] = {}
        #: Names released here for want of a consumer, each with why (until hosted again).
        self._released: dict[str, str] = {}
        self._lock = threading.Lock()
        #: After how long without a consumer the runtime releases a pipeline (0: never;
        #: ``limits.idle_release_s``): the full server's refusal names it.
        self.idle_release_s = 0.0
        #: Called after a pipeline is hosted or removed (the fleet record publishes the
        #: count at once, so a client placing the next pipeline sees it).
        self.changed: Callable[[], None] = _nothing

    @property
    def limit(self) -> int:
        """The most pipelines this server hosts (limits.max_pipelines)."""
        return self._max

    def all(self) -> list[HostedPipeline]:
        with self._lock:
            return list(self._by_name.values())

    def count(self) -> int:
        with self._lock:
            return len(self._by_name)

    def get(self, name: str) -> HostedPipeline | None:
        with self._lock:
            return self._by_name.get(name)

    def local(self, name: str) -> HostedPipeline:
        """The pipeline ``name`` hosted here; NotFound, or FailedPrecondition naming the
        server that holds it."""
        hosted = self.get(check_name(name))
        if hosted is not None:
            return hosted
        with self._lock:
            released = self._released.get(name)
        if released is not None:
            raise Unavailable(released, pipeline=name)
        owner = self._store.owner(name)
        if owner is None:
            raise NotFound(f"pipeline {name!r} does not exist")
        raise FailedPrecondition(f"pipeline {name!r} is held by server {owner.holder}, "
                                 f"not by this one ({self._address}): its stream and "
                                 f"checkpoints are served there (`conveyor --server "
                                 f"{owner.holder} ...`)", holder=owner.holder)

    def check_capacity(self, name: str) -> None:
        with self._lock:
            if name in self._by_name or len(self._by_name) < self._max:
                return
            hosted = list(self._by_name.values())
        raise ResourceExhausted(full_message(hosted, self._max, self.idle_release_s))

    def host(self, hosted: HostedPipeline) -> None:
        """Host ``hosted``; a pipeline of the same name hosted before ends and is closed."""
        with self._lock:
            previous = self._by_name.get(hosted.name)
            self._by_name[hosted.name] = hosted
            self._released.pop(hosted.name, None)
        if previous is not None:
            previous.end(f"pipeline {hosted.name!r} was restored again on {self._address}")
            previous.close()
        self.changed()

    def remove(self, hosted: HostedPipeline, released: str | None = None) -> None:
        """Stop hosting ``hosted``; ``released``: why, where it was released for want of a
        consumer (a stream of it asked here later gets it as UNAVAILABLE, and fails over)."""
        with self._lock:
            if self._by_name.get(hosted.name) is hosted:
                del self._by_name[hosted.name]
                if released is not None:
                    self._released[hosted.name] = released
        self.changed()

    def fence(self, seen: HostedPipeline, holder: str | None) -> None:
        """End the local pipeline ``seen`` (as the watcher saw it): restored on ``holder``,
        or (None) deleted through another server. Nothing happens if the name now holds
        another pipeline (deleted and created again here meanwhile) or is being deleted."""
        name = seen.name
        if self.get(name) is not seen or seen.deleting:
            return
        what = (f"was restored on server {holder}" if holder is not None
                else "was deleted through another server")
        if seen.end(f"pipeline {name!r} {what}: this server is fenced and its stream and "
                    "checkpoints are refused", holder=holder or ""):
            log.warning("pipeline %s %s: fenced here", name, what,
                        extra={"pipeline": name, "holder": holder or ""})
