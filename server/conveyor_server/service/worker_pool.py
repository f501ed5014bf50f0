"""The server's worker threads, which every hosted pipeline computes on, and how busy they are.

``WorkerPool`` is a ``ThreadPoolExecutor`` that adds up the time its tasks run:
``busy_seconds()`` grows by one second for each second one worker spends computing, so the
busy fraction over an interval is its growth divided by the interval and ``threads``
(the fleet record publishes it, ``fleet.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class WorkerPool(ThreadPoolExecutor):
    def __init__(self, threads: int, thread_name_prefix: str = "") -> None:
        super().__init__(threads, thread_name_prefix=thread_name_prefix)
        self.threads = threads
        self._lock = threading.Lock()
        self._busy = 0.0
        #: Start times of the tasks running now, by task.
        self._running: dict[int, float] = {}

    def submit(self, fn: Callable[P, T], /, *args: P.args,
               **kwargs: P.kwargs) -> Future[T]:
        def timed() -> T:
            key = threading.get_ident()
            with self._lock:
                self._running[key] = time.monotonic()
            try:
                return fn(*args, **kwargs)
            finally:
                with self._lock:
                    self._busy += time.monotonic() - self._running.pop(key)
        return super().submit(timed)

    def busy_seconds(self) -> float:
        """Worker time spent in tasks so far, those still running included."""
        now = time.monotonic()
        with self._lock:
            return self._busy + sum(now - started for started in self._running.values())
