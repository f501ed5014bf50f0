"""This server's record in the fleet: published while it runs, so clients can place pipelines.

``FleetPublisher`` writes the server's ``ServerRecord`` (``store/fleet.py``) when it
starts, again every third of the record's time to live (``RECORD_TTL_S``), and when what
it hosts changes: a pipeline hosted or removed is published before the call that did it
answers (so a client placing its next pipeline sees it), a stream opened or closed within
``CHECK_S``, and draining at once; a clean stop deletes the record. A server that dies
drops out when its record expires. Redis being unreachable is logged once per outage: the
record then expires and clients place pipelines elsewhere.

The load published: pipelines and streams hosted now, and the fraction of the worker
threads' time spent computing over the last refresh interval (``worker_pool.py``). The
behaviour digest (``behaviour_digest``) sums up the engine's identity: the key schedule,
the output version and every operator's behaviour digest; servers with the same digest
compute the same bytes.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time

from conveyor.errors import ConveyorError
from conveyor_server.engine import keyed_random
from conveyor_server.engine.identity.behaviour.measure import Behaviour
from conveyor_server.engine.identity.engine_id import OUTPUT_VERSION
from conveyor_server.service.handlers import ConveyorService
from conveyor_server.store.fleet import Fleet, ServerRecord

log = logging.getLogger("conveyor.server")
#: A record expires this long after it was last published (seconds).
RECORD_TTL_S = 6.0
#: How often the publisher looks for a change of what the server hosts (seconds).
CHECK_S = 0.05


def behaviour_digest(behaviour: Behaviour) -> str:
    """Hex digest of the engine's identity: key schedule, output version and every
    operator's behaviour digest, by key."""
    h = hashlib.sha256(f"{keyed_random.KEY_SCHEDULE}\0{OUTPUT_VERSION}\0".encode())
    for key in sorted(behaviour.digests):
        h.update(f"{key}\0".encode() + behaviour.digests[key])
    return h.hexdigest()[:32]


class FleetPublisher:
    def __init__(self, service: ConveyorService, *, ttl_s: float = RECORD_TTL_S,
                 check_s: float = CHECK_S) -> None:
        self.service = service
        self.fleet = Fleet(service.store)
        self.ttl_s = ttl_s
        self.check_s = check_s
        self.digest = behaviour_digest(service.behaviour)
        self._stopped = threading.Event()
        self._lock = threading.Lock()  # one publish at a time, and none after the removal
        self._removed = False
        self._last: tuple[int, int, bool] | None = None
        self._refreshed = 0.0
        #: (when, worker busy seconds) at the last refresh: the busy fraction's window.
        self._sample = (time.monotonic(), service.workers.busy_seconds())
        self._busy = 0.0
        self._failing = False
        self._thread = threading.Thread(target=self._run, name="fleet-publisher", daemon=True)

    def start(self) -> None:
        self.publish()
        self.service.pipelines.changed = self.publish
        self._thread.start()

    def _state(self) -> tuple[int, int, bool]:
        service = self.service
        return (service.pipelines.count(), service.streams.slots.active,
                service.streams.draining.is_set())

    def _run(self) -> None:
        while not self._stopped.wait(self.check_s):
            if (time.monotonic() - self._refreshed >= self.ttl_s / 3
                    or self._state() != self._last):
                self.publish()

    def _measure_busy(self) -> None:
        now, busy = time.monotonic(), self.service.workers.busy_seconds()
        then, before = self._sample
        if now - then >= self.ttl_s / 6:  # a change's publish keeps the last measure
            threads = self.service.workers.threads
            self._busy = min(1.0, max(0.0, (busy - before) / ((now - then) * threads)))
            self._sample = (now, busy)

    def publish(self) -> None:
        """Write the record now (it says draining once the server drains)."""
        with self._lock:
            if self._removed:
                return
            state = self._state()
            self._measure_busy()
            service = self.service
            record = ServerRecord(
                address=service.address, instance=service.instance,
                worker_threads=service.workers.threads,
                max_pipelines=service.pipelines.limit,
                max_streams=service.streams.slots.max_streams,
                pipelines=state[0], streams=state[1], busy=round(self._busy, 4),
                draining=state[2], behaviour_digest=self.digest,
                published_ms=int(time.time() * 1000))
            try:
                self.fleet.publish(record, self.ttl_s)
            except ConveyorError as exc:
                if not self._failing:
                    log.warning("could not publish this server in the fleet: %s (clients "
                                "place no pipelines here until it is published again)",
                                exc.message, extra={"error": exc.message})
                self._failing = True
                return
            if self._failing:
                log.info("published this server in the fleet again")
            self._failing = False
            self._last = state
            self._refreshed = time.monotonic()

    def stop(self) -> None:
        """Stop publishing and delete the record (a clean stop)."""
        self._stopped.set()
        with self._lock:
            if self._removed:
                return
            self._removed = True
        try:
            self.fleet.remove(self.service.instance)
        except ConveyorError as exc:
            log.warning("could not remove this server from the fleet: %s (its record "
                        "expires within %.0f s)", exc.message, self.ttl_s,
                        extra={"error": exc.message})
