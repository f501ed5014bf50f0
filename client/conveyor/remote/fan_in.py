"""Fan-in: one trainer's batches computed by several servers, delivered in order.

A batch is a pure function of its index, so any server with the same behaviour computes
the same bytes for it. ``FanIn`` asks each worker (a ``ComputeBatches`` call, started from
the pipeline's position that its holder answered) for short runs of consecutive indices,
and hands the trainer exactly the one-server sequence: index ``consumed``, then the next,
each once, in order, whatever the workers do.

- **Pull.** A worker gets a new run (``RANGE`` indices) only while it has fewer than
  ``PER_WORKER`` outstanding, so a faster worker takes more. No index at or past
  ``consumed + window`` is asked (window: workers x ``PER_WORKER`` + ``SLACK``), so the
  reorder buffer holds at most that many batches: the memory bound is window x batch
  bytes.
- **Stragglers.** A worker that answered nothing for a while (``HEDGE_FLOOR_S``, or
  ``HEDGE_FACTOR`` times its own time per batch if longer) while the trainer waits for one
  of its indices is marked suspect: it gets no new work, and its outstanding indices are
  asked of other workers too (hedging). The first copy wins; the other is cancelled, and
  if both arrive their bytes are compared (``mismatches`` must stay 0). A suspect worker
  that answers again is trusted again.
- **Lost workers.** A call that fails (the server died, drained, was partitioned) gives
  its outstanding indices back at once; they go to the other workers first.
- **Members.** ``workers=k`` keeps k workers (the holder first, then the least loaded live
  servers of the fleet); ``"auto"`` uses every live, non-draining server whose behaviour
  digest is the holder's, and looks at the fleet again every ``REFRESH_S``: a new server
  computes within seconds, one with another digest or that refuses the call is left out
  and logged with the reason.
- **The holder.** The pipeline keeps one name, lease and checkpoint history on its holder;
  it is told where the trainer stands every ``PROGRESS_S`` (``Checkpoint`` with
  ``position_only``), so its description, its drain and its checkpoints follow the trainer.

Threads: one per worker reads its call (``fan_in_worker.py``); one looks after the fleet and
the holder. All are daemon threads; ``close()`` cancels every call and returns at once.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from typing import Protocol

from conveyor import errors
from conveyor.remote.cluster import Cluster
from conveyor.remote.fan_in_worker import Worker, digest
from conveyor.tensor_list import TensorList
from conveyor.transport.allocator import tune_client_process
from conveyor.v1 import service_pb2

log = logging.getLogger("conveyor.client")
Batch = tuple[TensorList, ...]

#: Consecutive indices asked of a worker at once.
RANGE = 2
#: Indices a worker may have asked and not delivered.
PER_WORKER = 4
#: Batches of reorder room beyond the workers' own.
SLACK = 4
#: The shortest silence after which a worker the trainer waits on is hedged (seconds).
HEDGE_FLOOR_S = 0.5
#: ... or this many times its own time per batch, if longer.
HEDGE_FACTOR = 4.0
#: How often the fleet is looked at again (seconds), and the holder told the position.
REFRESH_S = 2.0
PROGRESS_S = 1.0
#: A server whose call failed is not asked again for this long (its record outlives it).
RETRY_S = 10.0


class Holder(Protocol):
    """The pipeline a fan-in computes for (``RemotePipeline``): its name, the servers it
    was opened through, its holder and the trainer's position there."""

    name: str
    via: str

    @property
    def client(self) -> Cluster: ...

    @property
    def consumed(self) -> int: ...

    def position(self, consumed: int) -> bytes: ...

    def tell_holder(self, consumed: int) -> bytes: ...


def check_workers(workers: object) -> int | None:
    """``workers`` as a count, or None for ``"auto"``; InvalidArgument otherwise."""
    if workers == "auto":
        return None
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise errors.InvalidArgument(
            f"workers: got {workers!r}, expected a count of servers (1 or more) or \"auto\"")
    return workers


class FanIn:
    def __init__(self, pipe: Holder, workers: int | None) -> None:
        self.pipe = pipe
        self.client = pipe.client
        self.name = pipe.name
        #: The workers wanted (None: every suitable server of the fleet).
        self.target = workers
        self.cond = threading.Condition()
        self.consumed = pipe.consumed
        self._next = self.consumed
        self._requeued: list[int] = []
        #: Batches arrived ahead of the trainer, and whether each opens an external
        #: source's epoch.
        self._ready: dict[int, tuple[Batch, bool]] = {}
        self._digests: dict[int, bytes] = {}
        self._hedged: set[int] = set()
        self.workers: list[Worker] = []
        #: Servers left out, and why; servers whose call failed, and when.
        self.left_out: dict[str, str] = {}
        self._failed_at: dict[str, float] = {}
        self._refusal: errors.ConveyorError | None = None
        #: Indices computed again (hedged or given back), and copies whose bytes differed.
        self.reruns = 0
        self.mismatches = 0
        self._closed = False
        self._reported = -1
        self._blob = b""
        self._digest = ""

    # -- members -----------------------------------------------------------------------

    def start(self) -> None:
        """Ask the holder for the position and start the workers."""
        tune_client_process()
        self._blob = self.pipe.position(self.consumed)
        self._reported = self.consumed
        self._add_workers()
        threading.Thread(target=self._look_after, name=f"conveyor-fan-in {self.name}",
                         daemon=True).start()

    @property
    def closed(self) -> bool:
        return self._closed

    def addresses(self) -> list[str]:
        """The servers computing now (not those suspected of having stopped)."""
        with self.cond:
            return [w.address for w in self.workers if not w.suspect]

    def data_channels(self) -> list[str]:
        """The servers computing now whose call receives on a data channel."""
        with self.cond:
            return [w.address for w in self.workers if w.data_channel]

    def _candidates(self) -> list[service_pb2.ServerInfo]:
        """Live, non-draining servers with the holder's behaviour, the holder first, then
        the least loaded."""
        servers = self.client.fleet()
        if not servers:  # servers that publish no records: the client's own targets
            return [service_pb2.ServerInfo(address=a) for a in self.client.servers()]
        holder = [s for s in servers if s.address == self.pipe.via]
        wanted = holder[0].behaviour_digest if holder else self._digest
        if not wanted:
            digests = [s.behaviour_digest for s in servers]
            wanted = max(set(digests), key=digests.count)
        self._digest = wanted
        found = []
        for server in servers:
            if server.behaviour_digest != wanted:
                self._leave_out(server.address, f"its behaviour digest "
                                f"{server.behaviour_digest[:12]}... is not the holder's "
                                f"({wanted[:12]}...): it would compute other bytes")
            elif not server.draining:
                found.append(server)
        found.sort(key=lambda s: (s.address != self.pipe.via, s.busy,
                                  s.streams / max(1, s.max_streams)))
        return found

    def _leave_out(self, address: str, why: str) -> None:
        if self.left_out.get(address) != why:
            self.left_out[address] = why
            log.warning("conveyor: fan-in of %s leaves server %s out: %s", self.name,
                        address, why)

    def _add_workers(self) -> None:
        try:
            candidates = self._candidates()
        except errors.ConveyorError as exc:
            log.info("conveyor: fan-in of %s could not list the fleet: %s", self.name,
                     exc.message)
            return
        now = time.monotonic()
        with self.cond:
            if self._closed:
                return
            have = {w.address for w in self.workers}
            for server in candidates:
                if self.target is not None and len(self.workers) >= self.target:
                    break
                address = server.address
                if (address in have or address in self.left_out
                        or now - self._failed_at.get(address, -RETRY_S) < RETRY_S):
                    continue
                worker = Worker(self, address)
                self.workers.append(worker)
                worker.start(self.name, self._blob)
                log.info("conveyor: fan-in of %s: server %s computes from batch %d",
                         self.name, address, self.consumed)
            self._dispatch()
            self.cond.notify_all()

    def _look_after(self) -> None:
        """Every few seconds: the holder is told the trainer's position; the fleet is
        looked at again when workers are missing (``"auto"``: always)."""
        refreshed = time.monotonic()
        while True:
            with self.cond:
                self.cond.wait_for(lambda: self._closed, PROGRESS_S)
                if self._closed:
                    return
                consumed, missing = self.consumed, (
                    self.target is None or len(self.workers) < self.target)
            if consumed != self._reported:
                try:
                    self.pipe.tell_holder(consumed)
                    self._reported = consumed
                except errors.ConveyorError as exc:
                    log.info("conveyor: could not tell the holder of %s its position: %s",
                             self.name, exc.message)
            if missing and time.monotonic() - refreshed >= REFRESH_S:
                refreshed = time.monotonic()
                self._add_workers()

    # -- the workers' side ---------------------------------------------------------------

    def arrived(self, worker: Worker, index: int, batch: Batch,
                opens_source_epoch: bool = False) -> None:
        now = time.monotonic()
        with self.cond:
            asked = worker.outstanding.pop(index, None)
            if asked is None and index not in worker.cancelled:
                worker_error = errors.DataLoss(f"worker {worker.address} sent batch {index}, "
                                               "which it was not asked for")
                self._lose(worker, worker_error)
                return
            worker.cancelled.discard(index)
            if asked is not None:
                took = now - max(worker.last_answer, asked)
                worker.per_batch = took if worker.per_batch is None else \
                    0.8 * worker.per_batch + 0.2 * took
            worker.last_answer = now
            worker.delivered += 1
            if worker.suspect:
                worker.suspect = False
                log.info("conveyor: fan-in of %s: server %s answers again", self.name,
                         worker.address)
            if index < self.consumed or index in self._ready:
                self._compare(index, batch, worker)
            else:
                self._ready[index] = batch, opens_source_epoch
                if index in self._hedged:
                    self._digests[index] = digest(batch)
                for other in self.workers:
                    if other is not worker:
                        other.cancel(index)
            self._dispatch()
            self.cond.notify_all()

    def _compare(self, index: int, batch: Batch, worker: Worker) -> None:
        first = self._digests.get(index)
        if first is None and index in self._ready:
            first = digest(self._ready[index][0])
        if first is not None and first != digest(batch):
            self.mismatches += 1
            log.error("conveyor: fan-in of %s: server %s computed other bytes for batch %d "
                      "than the copy delivered (a mixed fleet?)", self.name, worker.address,
                      index)

    def lost(self, worker: Worker, error: errors.ConveyorError) -> None:
        with self.cond:
            self._lose(worker, error)
            self.cond.notify_all()

    def _lose(self, worker: Worker, error: errors.ConveyorError) -> None:
        if worker not in self.workers:
            return
        self.workers.remove(worker)
        worker.stop()
        if self._closed:
            return
        refused = not worker.delivered and not isinstance(
            error, errors.Unavailable | errors.ResourceExhausted)  # those may pass
        if refused:
            self._leave_out(worker.address, f"it refused the call: {error.message}")
            self._refusal = error
        else:
            self._failed_at[worker.address] = time.monotonic()
            log.warning("conveyor: fan-in of %s lost server %s (%d batches given back): %s",
                        self.name, worker.address, len(worker.outstanding), error.message)
        for index in worker.outstanding:
            self._give_back(index)
        worker.outstanding.clear()
        self._dispatch()

    def _give_back(self, index: int) -> None:
        """Have ``index`` computed by another worker, unless it is in or on its way."""
        if index < self.consumed or index in self._ready or index in self._requeued:
            return
        if any(index in w.outstanding for w in self.workers if not w.suspect):
            return
        heapq.heappush(self._requeued, index)
        self.reruns += 1

    # -- scheduling (under ``cond``) -----------------------------------------------------

    def _window(self) -> int:
        return max(1, len(self.workers)) * PER_WORKER + SLACK

    def _dispatch(self) -> None:
        limit = self.consumed + self._window()
        for worker in sorted(self.workers, key=lambda w: len(w.outstanding)):
            while not worker.suspect and len(worker.outstanding) < PER_WORKER:
                run = self._take(worker, limit, PER_WORKER - len(worker.outstanding))
                if not run:
                    break
                worker.ask(run[0], len(run))

    def _take(self, worker: Worker, limit: int, room: int) -> list[int]:
        """The next run of consecutive indices for ``worker``: indices given back first,
        then new ones below ``limit``."""
        run: list[int] = []
        skipped: list[int] = []
        while self._requeued and len(run) < min(room, RANGE):
            index = self._requeued[0]
            if index < self.consumed or index in self._ready:
                heapq.heappop(self._requeued)
                continue
            if run and index != run[-1] + 1:
                break
            heapq.heappop(self._requeued)
            if index in worker.outstanding:
                skipped.append(index)
                continue
            run.append(index)
        for index in skipped:
            heapq.heappush(self._requeued, index)
        if run:
            self._hedged.update(run)
            return run
        count = min(room, RANGE, limit - self._next)
        if count <= 0:
            return []
        run = list(range(self._next, self._next + count))
        self._next += count
        return run

    def _hedge(self, now: float) -> None:
        """The trainer waits for ``consumed``: a silent worker holding it is suspect and
        its indices go to the others too."""
        for worker in self.workers:
            if worker.suspect or self.consumed not in worker.outstanding:
                continue
            patience = max(HEDGE_FLOOR_S, HEDGE_FACTOR * (worker.per_batch or 0.0))
            if now - worker.last_answer < patience:
                continue
            if not any(w is not worker and not w.suspect for w in self.workers):
                continue  # nobody to hedge with
            worker.suspect = True
            log.warning("conveyor: fan-in of %s: server %s answered nothing for %.1f s: "
                        "its %d batches are asked of the other servers too", self.name,
                        worker.address, now - worker.last_answer, len(worker.outstanding))
            for index in sorted(worker.outstanding):
                self._give_back(index)
            self._dispatch()

    # -- the trainer's side --------------------------------------------------------------

    def run(self) -> Batch:
        """The next batch in order."""
        with self.cond:
            self._wait_ready()
            batch, _ = self._ready.pop(self.consumed)
            self._hedged.discard(self.consumed)
            self.consumed += 1
            if len(self._digests) > self._window():  # a late copy still finds its digest
                oldest = self.consumed - self._window()
                for index in [i for i in self._digests if i < oldest]:
                    del self._digests[index]
            self._dispatch()
        return batch

    def opens_source_epoch(self) -> bool:
        """Whether the next batch in order opens an external source's epoch (waits for
        it; it stays the next, not consumed)."""
        with self.cond:
            self._wait_ready()
            return self._ready[self.consumed][1]

    def _wait_ready(self) -> None:
        """Wait (holding ``cond``) until the next batch in order arrived."""
        waited_from: float | None = None
        while self.consumed not in self._ready:
            if self._closed:
                raise errors.FailedPrecondition(
                    f"the fan-in of {self.name!r} was closed after {self.consumed} "
                    "batches")
            now = time.monotonic()
            self._hedge(now)
            if self.workers:
                waited_from = None
            elif waited_from is None:
                waited_from = now
            elif self._refusal is not None and self.target is not None:
                raise self._refusal
            elif now - waited_from > self.client.timeout:
                raise errors.Unavailable(
                    f"no server computes pipeline {self.name!r} (waited "
                    f"{self.client.timeout:.0f} s); left out: "
                    f"{self.left_out or 'none'}")
            self.cond.wait(0.05)

    def close(self) -> None:
        with self.cond:
            self._closed = True
            workers, self.workers = self.workers, []
            self._ready.clear()
            self.cond.notify_all()
        for worker in workers:
            worker.stop()
