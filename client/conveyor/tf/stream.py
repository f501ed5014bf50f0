"""``BatchStream``: a pipeline's batches read by their index in the stream.

TensorFlow asks for batch ``i`` (``i`` counted from the pipeline's start, as
``RemotePipeline.consumed`` counts), not for "the next one": a fresh iterator asks from the
dataset's start, a restored one from the position its checkpoint holds. The stream serves
the batch it is at; asked for another, it reopens the pipeline there with ``Client.open``
(O(1) on the server: no replay), on any server of the list. A data-parallel job's rank
counts its steps the same way (``conveyor.remote.opening``): batch ``i`` is its share of step
``i``.

Once closed, it opens nothing again. tf.data computes batches ahead on threads of its own,
so an iterator that outlived its loop (a ``for`` loop's after its ``break``, Keras' after
``fit``) still asks for the next ones after ``close()``. Reopened for it, the pipeline
would be claimed again while the trainer's next dataset on it starts: that dataset's
stream would end ABORTED (the stale stream began after it: "a newer consumer took over")
or fenced (the stale restore came after its own). Such a request is refused instead.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from conveyor.client import Client
from conveyor.errors import FailedPrecondition
from conveyor.remote.pipeline import Batch, RemotePipeline
from conveyor.v1 import pipeline_pb2


def parallel_arguments(rank: int | None, world_size: int | None) -> dict[str, Any]:
    """``rank`` and ``world_size`` for ``Client.open``, only those given (the others keep
    its defaults: rank 0 of 1)."""
    return {key: value for key, value in (("rank", rank), ("world_size", world_size))
            if value is not None}


class BatchStream:
    def __init__(self, servers: str | Sequence[str], name: str,
                 spec: pipeline_pb2.PipelineSpec, *, run_id: str | None,
                 parallel: dict[str, Any], client_options: dict[str, Any]) -> None:
        self.name, self._spec, self._run_id = name, spec, run_id
        self._parallel = parallel
        self._lock = threading.Lock()
        self._client = Client(servers, **client_options)
        try:
            self._pipe: RemotePipeline | None = self._open(None)
        except BaseException:
            self._client.close()
            raise
        #: Where the pipeline stood when opened: a fresh iterator starts here.
        self.start = self._pipe.consumed
        self._held: tuple[int, Batch] | None = None
        self._closed = False

    def _open(self, consumed: int | None) -> RemotePipeline:
        return self._client.open(self.name, self._spec, run_id=self._run_id,
                                 consumed=consumed, **self._parallel)

    def first(self) -> Batch:
        """The batch at ``start``, kept for the iterator that asks for it."""
        with self._lock:
            self._check_open(self.start)
            if self._held is None:
                self._held = (self.start, self._next(self.start))
            return self._held[1]

    def batch(self, index: int) -> Batch:
        """Batch ``index`` of the stream (the one after ``index`` batches)."""
        with self._lock:
            self._check_open(index)
            if self._held is not None and self._held[0] == index:
                held, self._held = self._held[1], None
                return held
            return self._next(index)

    def _next(self, index: int) -> Batch:
        if self._pipe is None or self._pipe.consumed != index:
            if self._pipe is not None:
                self._pipe.close()
                self._pipe = None
            self._pipe = self._open(index)
        return self._pipe.run_on()  # (no stop where a source's epoch ends)

    def _check_open(self, index: int) -> None:
        if self._closed:
            raise FailedPrecondition(
                f"the stream of pipeline {self.name!r} was closed (ConveyorDataset.close()): "
                f"batch {index} is not read, and the pipeline is not opened again for an "
                "iterator that outlived the dataset; make a new ConveyorDataset to go on")

    def close(self) -> None:
        """End the stream for good: a batch asked for afterwards is refused (a request
        already under way finishes first)."""
        with self._lock:
            self._closed = True
            if self._pipe is not None:
                self._pipe.close()
                self._pipe = None
            self._held = None
        self._client.close()
