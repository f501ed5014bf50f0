"""Run the engine and encode batches on a thread of their own, ahead of the gRPC sender.

The stream's handler thread spends its time handing frames to gRPC; without a pump, the
engine would only be asked for the next batch after the current one was sent, and the
workers would idle while frames go out. The pump keeps ``ahead`` encoded batches ready.
"""

from __future__ import annotations

import queue
import threading

from conveyor.wire import encode_frames
from conveyor_server.pipeline import Pipeline

#: A batch's index and its frames, each an encoded StreamBatchesResponse.
Encoded = tuple[int, list[bytes]]


class BatchPump:
    """At most ``ahead`` encoded batches wait for the sender: the pump takes a slot before
    it asks the engine for a batch, and the sender frees it when it takes the batch. So a
    stream holds its engine's prefetch, ``ahead`` waiting batches and the one being sent."""

    def __init__(self, engine: Pipeline, name: str, ahead: int = 1) -> None:
        self._engine = engine
        self._queue: queue.SimpleQueue[Encoded | BaseException] = queue.SimpleQueue()
        self._slots = threading.Semaphore(ahead)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"pump-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._slots.acquire(timeout=0.1):
                continue
            try:
                batch = self._engine.run()
                index = self._engine.batches_returned - 1
                self._queue.put((index, list(encode_frames(index, batch))))
            except BaseException as exc:  # handed to the stream, which raises it
                self._queue.put(exc)
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
        self._slots.release()
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
