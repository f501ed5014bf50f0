"""Run the engine and encode batches on a thread of their own, ahead of the gRPC sender.

The stream's handler thread spends its time handing frames to gRPC; without a pump, the
engine would only be asked for the next batch after the current one was sent, and the
workers would idle while frames go out. The pump keeps ``ahead`` encoded batches ready.
"""

from __future__ import annotations

import queue
import threading
import time

from conveyor.errors import DataFileError
from conveyor.wire import encode_frames
from conveyor_server.metrics import Metrics
from conveyor_server.pipeline import Pipeline

#: A batch's index and its frames, each an encoded StreamBatchesResponse.
Encoded = tuple[int, list[bytes]]


class BatchPump:
    def __init__(self, engine: Pipeline, name: str, metrics: Metrics, ahead: int = 1) -> None:
        self._engine = engine
        self._metrics = metrics
        self._queue: queue.Queue[Encoded | BaseException] = queue.Queue(maxsize=ahead)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"pump-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            item: Encoded | BaseException
            try:
                started = time.perf_counter()
                batch = self._engine.run()
                self._metrics.batch_latency.observe(time.perf_counter() - started)
                index = self._engine.batches_returned - 1
                item = (index, list(encode_frames(index, batch)))
                del batch  # only the frames stay resident while they wait
            except BaseException as exc:  # handed to the stream, which raises it
                if isinstance(exc, DataFileError):
                    self._metrics.decode_errors.inc()
                item = exc
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if isinstance(item, BaseException):
                return

    def get(self, timeout: float) -> Encoded | None:
        """The next encoded batch, or None if none is ready within ``timeout``; raises what
        the engine raised."""
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(item, BaseException):
            raise item
        return item

    def stop(self) -> None:
        """Stop and wait for the engine call in progress, so the engine is free again."""
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join()
