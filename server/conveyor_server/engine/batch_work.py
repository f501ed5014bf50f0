"""One batch's per-sample work, shared by a few worker tasks that claim samples in turn.

A batch is ``num_threads`` tasks, not one task per sample: each task takes the next
unclaimed sample until none is left, so the workers stay balanced while the pool sees a
handful of futures per batch instead of one per sample (every future is a lock, a wakeup
and a trip through the GIL). Which worker computes a sample changes nothing: every random
draw is keyed by the sample's global index. Errors are kept per sample and the first in
sample order is raised, so the error a batch reports does not depend on timing either.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from concurrent.futures import CancelledError, Executor, Future, wait
from typing import Any

Sources = dict[int, Any]


class BatchWork:
    def __init__(self, sources: list[Sources], compute: Callable[[Sources], list[Any]]) -> None:
        self._sources = sources
        self._compute = compute
        self._results: list[list[Any] | None] = [None] * len(sources)
        self._errors: list[BaseException | None] = [None] * len(sources)
        self._claim = itertools.count()  # next() on it is atomic: one C call under the GIL
        self._cancelled = False
        self._futures: list[Future[None]] = []

    def start(self, pool: Executor, tasks: int) -> None:
        count = max(1, min(tasks, len(self._sources)))
        self._futures = [pool.submit(self._work) for _ in range(count)]

    def _work(self) -> None:
        size = len(self._sources)
        while not self._cancelled:
            i = next(self._claim)
            if i >= size:
                return
            try:
                self._results[i] = self._compute(self._sources[i])
            except BaseException as exc:  # raised in sample order by results()
                self._errors[i] = exc

    def cancel(self) -> None:
        """Stop claiming samples; tasks not started yet are dropped."""
        self._cancelled = True
        for f in self._futures:
            f.cancel()

    def ready(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds (None: for as long as it takes) for every task to
        end, cancelled ones included; True if they have."""
        if all(f.done() for f in self._futures):  # the usual case once prefetched
            return True
        return not wait(self._futures, timeout).not_done

    def results(self) -> list[list[Any]]:
        """Every sample's outputs in order, or the first sample's error; ``CancelledError``
        if the batch was cancelled."""
        for f in self._futures:
            f.result()
        if self._cancelled:
            raise CancelledError
        for error in self._errors:
            if error is not None:
                raise error
        return self._results  # type: ignore[return-value]
