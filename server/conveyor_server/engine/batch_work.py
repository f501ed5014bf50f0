"""One batch's work: per-sample phases shared by a few worker tasks, batch phases between.

A batch runs its phases in order. A per-sample phase is ``num_threads`` tasks, not one
task per sample: each task takes the next unclaimed sample until none is left, so the
workers stay balanced while the pool sees a handful of futures per batch instead of one
per sample (every future is a lock, a wakeup and a trip through the GIL). A batch phase
runs once, on the worker that finished the phase before it: that is the barrier. Then the
next per-sample phase starts. A batch phase that comes first (reading the batch's files in
one call) is a task of its own on a worker, so the thread that starts batches goes on
starting them. Which worker computes a sample changes nothing: every random
draw is keyed by the sample's global index.

Errors are kept per sample and a phase with errors ends the batch: the first error in
sample order of that phase is raised, so the error a batch reports does not depend on
timing either (with batched operators, a sample that fails in an earlier phase is reported
before one that would fail in a later one).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Executor, Future
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

S = TypeVar("S")


@dataclass(frozen=True)
class SamplePhase(Generic[S]):
    """Work on one sample's state, run for every sample on the worker threads."""

    run: Callable[[S], None]


@dataclass(frozen=True)
class BatchPhase(Generic[S]):
    """Work on the whole batch's states at once, run once per batch."""

    run: Callable[[list[S]], None]


Phase = SamplePhase[S] | BatchPhase[S]


class BatchEnd:
    """Where a batch's last phase marks the end of its work for whoever takes the batch
    (a GPU batch's event, after its work on its stream); None until marked."""

    __slots__ = ("mark",)

    def __init__(self) -> None:
        self.mark: Any = None


class BatchWork(Generic[S]):
    def __init__(self, samples: list[S], phases: Sequence[Phase[S]],
                 end: BatchEnd | None = None) -> None:
        self._samples = samples
        self._phases = phases
        #: What the batch's last phase marks (see ``BatchEnd``; unmarked where no phase
        #: marks it).
        self.end = end if end is not None else BatchEnd()
        self._errors: list[BaseException | None] = [None] * len(samples)
        self._batch_error: BaseException | None = None
        self._phase = 0
        self._claim = itertools.count()  # next() on it is atomic: one C call under the GIL
        self._lock = threading.Lock()
        self._tasks = 0  # tasks submitted and not ended (or cancelled) yet
        self._futures: list[Future[None]] = []
        self._pool: Executor | None = None
        self._threads = 1
        self._cancelled = False
        self._done = threading.Event()

    def start(self, pool: Executor, threads: int) -> None:
        self._pool, self._threads = pool, threads
        first = self._phases[0] if self._phases else None
        if isinstance(first, BatchPhase):  # on a worker: not on the thread starting batches
            self._tasks = 1
            self._submit(partial(self._lead, first), 1)
        else:
            self._advance(inline=False)

    def _lead(self, phase: BatchPhase[S]) -> None:
        """Run the first phase, a batch phase, as a task; its end starts the next phase."""
        try:
            if not self._cancelled:
                phase.run(self._samples)
        except BaseException as exc:  # raised by results()
            self._batch_error = exc
        finally:
            self._task_ended()

    def _advance(self, *, inline: bool) -> None:
        """Run batch phases until a per-sample phase needs the workers (then start them) or
        the batch is done. Only one thread is here at a time: the one that started the
        batch, or the worker that ended the last task of a phase; that worker (``inline``)
        goes on as one of the next phase's workers, so a batch past its barrier is not
        queued behind the batches computed after it."""
        while True:
            with self._lock:
                if (self._phase >= len(self._phases) or self._cancelled
                        or self._batch_error is not None
                        or any(e is not None for e in self._errors)):
                    self._done.set()
                    return
                phase = self._phases[self._phase]
                if isinstance(phase, SamplePhase):
                    self._claim = itertools.count()
                    count = max(1, min(self._threads, len(self._samples)))
                    self._tasks = count  # before any of them can end
                    break
            try:
                phase.run(self._samples)
            except BaseException as exc:  # raised by results()
                self._batch_error = exc
            self._phase += 1
        helpers = count - 1 if inline else count
        self._submit(partial(self._work, phase), helpers)
        if inline:
            self._work(phase)

    def _submit(self, task: Callable[[], None], helpers: int) -> None:
        """Queue ``helpers`` runs of ``task`` (each counted in ``_tasks`` already)."""
        assert self._pool is not None
        for k in range(helpers):
            try:
                future = self._pool.submit(task)
            except RuntimeError:  # the pool was shut down: the pipeline is closing
                self._cancelled = True
                self._task_ended(helpers - k)  # those that will never run
                return
            with self._lock:
                self._futures.append(future)
            future.add_done_callback(self._on_done)

    def _on_done(self, future: Future[None]) -> None:
        if future.cancelled():  # by cancel() or by the pool's shutdown: it never ran
            self._cancelled = True
            self._task_ended()

    def _work(self, phase: SamplePhase[S]) -> None:
        try:
            size = len(self._samples)
            while not self._cancelled:
                i = next(self._claim)
                if i >= size:
                    break
                try:
                    phase.run(self._samples[i])
                except BaseException as exc:  # raised in sample order by results()
                    self._errors[i] = exc
        finally:
            self._task_ended()

    def _task_ended(self, count: int = 1) -> None:
        with self._lock:
            self._tasks -= count
            if self._tasks:
                return
            if self._cancelled:
                self._done.set()
                return
            self._futures = []
            self._phase += 1
        self._advance(inline=True)

    def cancel(self) -> None:
        """Stop claiming samples; tasks not started yet are dropped. A batch step already
        running finishes on its worker, unseen."""
        with self._lock:
            self._cancelled = True
            futures = self._futures
            if self._tasks == 0:
                self._done.set()
        for f in futures:
            f.cancel()  # counted by _on_done

    def ready(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds (None: for as long as it takes) for the batch to
        be done or cancelled; True if it is."""
        return self._done.is_set() or self._done.wait(timeout)

    def results(self) -> list[S]:
        """Every sample's final state in order, or the first sample's error (then the batch
        phase's); ``CancelledError`` if the batch was cancelled."""
        self._done.wait()
        if self._cancelled:
            raise CancelledError
        for error in self._errors:
            if error is not None:
                raise error
        if self._batch_error is not None:
            raise self._batch_error
        return self._samples
