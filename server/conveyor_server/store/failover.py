"""Riding through a Redis failover: a store operation that fails because the primary is
changing is tried again, against the new primary, for a bounded time.

A failover shows itself as a dropped or refused connection (the primary died; a name or a
Sentinel still points at it), a reply of a demoted primary (``READONLY``), no master known
to the Sentinels yet, a Redis still loading its data, or a checkpoint that too few replicas
acknowledged while they switch to the new primary (``ReplicasBehind``). ``Failover.run``
tries such an operation again until it succeeds or its window ends: ``redis.failover_s``
from the first failure, cut at the caller's deadline (``caller_deadline``): no attempt is
started that could end past that deadline (an attempt takes the Redis timeout at most).
Any other error is raised at once. A window of 0 tries once (what a ``Store`` built
without one does).

The window's end is ``Outlasted``, carrying the last failure and how long it was tried, so
that the store's message says what happened and what to do. Every store operation is
written to be tried again (``store.py``, ``scripts/``): one that was applied before its
reply was lost finds its own earlier write and answers it, so nothing is applied twice.

The caller's deadline is per RPC: the service's registration wraps each unary call in
``caller_deadline(context.time_remaining())``; a context variable carries it to the store
calls made for that RPC (also into a worker thread started with the RPC's context). Calls
outside an RPC (lease renewal, the fleet record) have the window alone.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import redis
from redis.exceptions import ClusterDownError, ReadOnlyError, TryAgainError

log = logging.getLogger("conveyor.server")
T = TypeVar("T")

#: First pause between two attempts (s); doubled up to ``MAX_PAUSE_S``.
FIRST_PAUSE_S = 0.05
MAX_PAUSE_S = 0.5
#: Replies of a Redis that is not (yet) the primary a write needs.
_CHANGING_REPLIES = ("MASTERDOWN", "LOADING")

#: The monotonic time by which the current RPC's store calls must have answered.
_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "conveyor_store_deadline", default=None)


@contextlib.contextmanager
def caller_deadline(remaining_s: float | None, margin_s: float = 0.05) -> Iterator[None]:
    """Within it, store calls end ``margin_s`` before ``remaining_s`` from now (None: the
    caller set no deadline)."""
    token = _deadline.set(None if remaining_s is None
                          else time.monotonic() + remaining_s - margin_s)
    try:
        yield
    finally:
        _deadline.reset(token)


class ReplicasBehind(Exception):
    """A write (``what``) reached fewer replicas than ``redis.min_replicas`` within its
    WAIT."""

    def __init__(self, acked: int, what: str) -> None:
        super().__init__(f"{what}: {acked} replicas acknowledged")
        self.acked = acked
        self.what = what


class Outlasted(Exception):
    """An operation still failed as a failover would when its window ended."""

    def __init__(self, last: Exception, tried_s: float, by_deadline: bool) -> None:
        super().__init__(str(last))
        self.last = last
        #: How long it was tried (s).
        self.tried_s = tried_s
        #: Whether the caller's deadline, not the window, ended it.
        self.by_deadline = by_deadline


def changing_primary(exc: BaseException) -> bool:
    """Whether ``exc`` is what a call meets while Redis changes its primary."""
    if isinstance(exc, ReadOnlyError | ClusterDownError | TryAgainError | ReplicasBehind):
        return True
    if isinstance(exc, redis.ResponseError):
        return str(exc).startswith(_CHANGING_REPLIES)
    # ConnectionError covers a refused or reset connection, the Sentinels' MasterNotFound
    # and a Redis loading its data; TimeoutError a primary that went silent.
    return isinstance(exc, redis.ConnectionError | redis.TimeoutError | ConnectionError)


class Failover:
    """Tries operations again over a failover: for ``window_s`` seconds, where one
    attempt may take ``attempt_s`` (the Redis timeout)."""

    def __init__(self, window_s: float, attempt_s: float, address: str) -> None:
        self.window_s = window_s
        self.attempt_s = attempt_s
        self._address = address

    def run(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()``, tried again while it fails as a failover would and the window lasts;
        ``Outlasted`` once it ends (the first failure itself where the window is 0 or the
        caller's deadline leaves no time for another attempt)."""
        first_failure: float | None = None
        pause = FIRST_PAUSE_S
        while True:
            try:
                result = fn()
            except Exception as exc:
                if not changing_primary(exc):
                    raise
                now = time.monotonic()
                if first_failure is None:
                    first_failure = now
                end = first_failure + self.window_s
                if now >= end:
                    raise Outlasted(exc, now - first_failure, by_deadline=False) from exc
                caller = _deadline.get()
                # The last attempt the caller's deadline leaves time for starts here.
                last_start = None if caller is None else caller - self.attempt_s
                if last_start is not None and now >= last_start:
                    raise Outlasted(exc, now - first_failure, by_deadline=True) from exc
                if pause == FIRST_PAUSE_S:
                    log.warning("Redis at %s failed %s (%s: %s): trying again as the "
                                "primary changes, for up to %.1f s (redis.failover_s)",
                                self._address, what, type(exc).__name__, exc,
                                self.window_s)
                until = end if last_start is None else min(end, last_start)
                time.sleep(min(pause, until - now))
                pause = min(pause * 2, MAX_PAUSE_S)
                continue
            if first_failure is not None:
                log.warning("Redis at %s answered %s again after %.1f s", self._address,
                            what, time.monotonic() - first_failure)
            return result
