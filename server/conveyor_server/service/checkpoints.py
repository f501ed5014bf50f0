"""Writing a hosted pipeline's checkpoints to Redis: ``CheckpointWriter``.

A checkpoint is computed by the engine in O(1) at a consumed position, sealed, and stored
under the pipeline's name with the fencing check: a server whose claim on the name was
taken over is refused, and its pipeline ends here. The Checkpoint RPC bounds its wait for
Redis by the caller's deadline.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

import grpc

from conveyor.errors import Fenced, Unavailable
from conveyor_server.service.hosted import HostedPipeline
from conveyor_server.service.jobs import Jobs
from conveyor_server.service.kill_points import NO_KILL_POINTS, KillPoints
from conveyor_server.service.observer import ServiceObserver
from conveyor_server.store.store import Store, StoredCheckpoint

log = logging.getLogger("conveyor.server")
T = TypeVar("T")
#: Time kept back from a caller's deadline for the reply to reach it.
DEADLINE_MARGIN_S = 0.05


class CheckpointWriter:
    def __init__(self, store: Store, instance: str, address: str,
                 observer: ServiceObserver, kill_points: KillPoints = NO_KILL_POINTS,
                 jobs: Jobs | None = None) -> None:
        self._store = store
        self._jobs = jobs or Jobs(store, instance)
        self._instance = instance
        self._address = address
        self._observer = observer
        self._kill_points = kill_points
        self._calls = ThreadPoolExecutor(4, thread_name_prefix="store-call")

    def write(self, hosted: HostedPipeline, batches: int, *,
              past_epoch_end: bool = False) -> StoredCheckpoint:
        """Store the checkpoint of ``hosted`` after ``batches`` consumed batches; a job's
        rank's is then marked in the job's record (``jobs.py``). ``past_epoch_end``: the
        trainer met the StopIteration of an external source's epoch ending there (the
        engine's ``checkpoint(past_epoch_end=)``)."""
        hosted.check_live()
        started = time.perf_counter()
        blob = hosted.engine.checkpoint(batches=batches, past_epoch_end=past_epoch_end)
        self._kill_points.reached("checkpoint.before_store")
        try:
            stored = self._store.write_checkpoint(hosted.name, self._instance,
                                                  hosted.generation, blob, batches,
                                                  self._address)
        except Fenced as exc:
            if hosted.end(exc.message):
                log.warning("checkpoint of %s refused: fenced (%s)", hosted.name, exc.message,
                            extra={"pipeline": hosted.name, "error": exc.message})
            raise
        self._kill_points.reached("checkpoint.after_store")
        share = hosted.engine.share
        if share.job:
            try:
                self._jobs.mark(share, batches, stored.id)
            except Fenced as exc:
                if hosted.end(exc.message):
                    log.warning("pipeline %s fenced: %s", hosted.name, exc.message,
                                extra={"pipeline": hosted.name, "error": exc.message})
                raise
        stored = dataclasses.replace(stored, creator=hosted.creator, run_id=hosted.run_id)
        self._observer.checkpoint_written(time.perf_counter() - started)
        hosted.latest_checkpoint = stored.id
        log.info("checkpoint %s of %s after batch %d (%d bytes)", stored.id, hosted.name,
                 batches, len(blob), extra={"pipeline": hosted.name, "checkpoint_id": stored.id,
                                            "batches": batches})
        return stored

    def write_within(self, context: grpc.ServicerContext, hosted: HostedPipeline,
                     batches: int, *, past_epoch_end: bool = False) -> StoredCheckpoint:
        """``write``, answering before the caller's deadline: a deadline shorter than the
        store's own timeout bounds the wait (the write may still land later, as one more
        retained checkpoint)."""
        return self._within_deadline(context, "the checkpoint",
                                     lambda: self.write(hosted, batches,
                                                        past_epoch_end=past_epoch_end))

    def for_drain(self, hosted: HostedPipeline) -> StoredCheckpoint | None:
        """For the drain: the checkpoint at the consumer's acknowledged position, recorded as
        the pipeline's drain checkpoint; None if it cannot have one. Written once per
        position, by the stream or by the drain, whichever comes first (the drain writes
        it for a stream blocked on flow control, whose loop cannot); written again if the
        consumer acknowledged more since."""
        if not hosted.engine.spec.enable_checkpointing or hosted.ended is not None:
            return None
        with hosted.drain_lock:
            done = hosted.drained
            if done is not None and done.batches == hosted.acknowledged:
                return done
            stored = self.write(hosted, hosted.acknowledged)
            hosted.drained = stored
            return stored

    def _within_deadline(self, context: grpc.ServicerContext, what: str,
                         call: Callable[[], T]) -> T:
        remaining = context.time_remaining()
        if remaining is None or remaining > self._store.timeout + DEADLINE_MARGIN_S:
            return call()
        # The caller's deadline (store/failover.py) goes with the call to its thread.
        future = self._calls.submit(contextvars.copy_context().run, call)
        try:
            return future.result(timeout=max(0.0, remaining - DEADLINE_MARGIN_S))
        except FutureTimeout:
            raise Unavailable(f"Redis at {self._store.address} did not complete {what} within "
                              f"the caller's deadline ({remaining:.2f} s)") from None
