"""Named points inside an RPC where a server can be told to die as kill -9 would kill it,
for the fault battery: ``faults.kill_at`` lists them (off by default).

An outside kill -9 lands between batches; these land where it is hardest to get right:
with a checkpoint about to be stored or stored but not yet answered, a restore about to
claim the name or holding it but not yet answering. The server sends itself SIGKILL, so
nothing runs after the point: no ``finally``, no reply, no flush.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterable

from conveyor.errors import InvalidArgument

log = logging.getLogger("conveyor.server")

#: Every point a server can be told to die at, and where it is.
POINTS = {
    "checkpoint.before_store": "a Checkpoint, its blob sealed, before Redis stores it",
    "checkpoint.after_store": "a Checkpoint stored in Redis, before the answer",
    "restore.before_claim": "a Restore, its engine built, before it claims the name",
    "restore.after_claim": "a Restore holding the name, before the answer",
}


class KillPoints:
    """``entries``: point names, each optionally with the time it is reached to die at
    (``checkpoint.after_store:2`` dies at the second checkpoint; the first by default)."""

    def __init__(self, entries: Iterable[str] = ()) -> None:
        self.at: dict[str, int] = {}
        for entry in entries:
            name, _, nth = entry.partition(":")
            if name not in POINTS:
                raise InvalidArgument(f"faults.kill_at: unknown point {name!r}; known: "
                                      f"{', '.join(sorted(POINTS))}")
            if nth and not (nth.isdigit() and int(nth) >= 1):
                raise InvalidArgument(f"faults.kill_at: {entry!r}: after ':' comes the "
                                      "time the point is reached to die at (1, 2, ...)")
            self.at[name] = int(nth or 1)
        self._reached: dict[str, int] = {}
        self._lock = threading.Lock()

    def reached(self, name: str) -> None:
        """Die here, as kill -9 would kill this process, if told to."""
        assert name in POINTS, name
        if name not in self.at:
            return
        with self._lock:
            count = self._reached[name] = self._reached.get(name, 0) + 1
        if count == self.at[name]:
            log.critical("faults.kill_at %s:%d: killing this server (%s)", name, count,
                         POINTS[name])
            for handler in logging.getLogger().handlers + log.handlers:
                handler.flush()
            os.kill(os.getpid(), signal.SIGKILL)


NO_KILL_POINTS = KillPoints()
