"""One parallel external source's calls (``parallel=True``) through its pipeline's pool of
worker processes (the pool is made from a plan by ``external_source.make_pool``).

A batch of a ``batch=False`` source is split into one run of consecutive samples per
worker; a ``batch=True`` source's batch is one task. The batch being asked for and the
``prefetch_queue_depth`` batches after it (within the epoch, where its length is known)
are in flight at once, as DALI's parallel sources prefetch. Replies are read in sample
order and the first that is not a result decides the batch, as the serial stage's first
failing call does: the batch's values and errors are the same whichever process computed
which sample. Speculative batches past an epoch's end are dropped (a pure source makes
them harmless).
"""

from __future__ import annotations

from typing import Any

from conveyor_server.engine.stages.source_pool import Reply, SourcePool


class ParallelCalls:
    def __init__(self, pool: SourcePool, source: int, name: str, *, batch: bool,
                 batch_size: int, depth: int) -> None:
        self._pool = pool
        self._source = source
        self._name = name
        self._batch = batch
        self._batch_size = batch_size
        self._depth = depth
        #: Tasks in flight by (epoch, iteration).
        self._jobs: dict[tuple[int, int], list[int]] = {}

    def batch(self, epoch: int, iteration: int, length: int | None) -> list[Reply]:
        """The replies for batch ``iteration`` of ``epoch``, in sample order, up to the
        first that is not a result; ``length``: the epoch's, where known."""
        for ahead in range(iteration, iteration + self._depth + 1):
            if length is not None and ahead >= length:
                break
            if (epoch, ahead) not in self._jobs:
                self._jobs[(epoch, ahead)] = self._submit(epoch, ahead, probe=False)
        tasks = self._jobs.pop((epoch, iteration))
        replies: list[Reply] = []
        try:
            for task in tasks:
                replies.append(self._pool.collect(task))
                if replies[-1].header["status"] != "ok":
                    break
        finally:
            self._pool.drop(tasks[len(replies):])
        return replies

    def probe(self, epoch: int, iteration: int) -> dict[str, Any]:
        """Whether the batch exists: one call (its last sample, with ``batch=False``)."""
        return self._pool.collect(self._submit(epoch, iteration, probe=True)[0]).header

    def drop(self) -> None:
        """Forget the batches in flight (a reset, an epoch's end)."""
        jobs, self._jobs = self._jobs, {}
        self._pool.drop([task for tasks in jobs.values() for task in tasks])

    def _submit(self, epoch: int, iteration: int, *, probe: bool) -> list[int]:
        where = {"epoch": epoch, "iteration": iteration, "probe": probe}
        if self._batch:
            return [self._pool.submit(self._source, self._name, **where)]
        if probe:
            return [self._pool.submit(self._source, self._name, first=self._batch_size - 1,
                                      count=1, **where)]
        runs = min(self._pool.size, self._batch_size)
        share, extra = divmod(self._batch_size, runs)
        tasks, first = [], 0
        for run in range(runs):
            count = share + (run < extra)
            tasks.append(self._pool.submit(self._source, self._name, first=first,
                                           count=count, **where))
            first += count
        return tasks
