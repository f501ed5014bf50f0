"""One server computing for a fan-in (``fan_in.py``): its ``ComputeBatches`` call, the
indices it was asked and has not delivered, and how fast it answers.

The call's requests go through a queue (the start, then ranges and cancellations, sent as
the scheduler decides); its frames are read on a daemon thread of its own, which hands each
batch, and the call's end, to the scheduler. The call asks for a data channel
(``data_channel.py``) unless it is off for the server; one that cannot be attached makes the
worker start its call again without one, asking again what it was asked.
"""

from __future__ import annotations

import hashlib
import queue
import threading
import time
from collections.abc import Iterator
from typing import Protocol

import grpc
import numpy as np

from conveyor import errors
from conveyor.remote.cluster import Cluster
from conveyor.tensor_list import TensorList
from conveyor.transport.connection import error_of
from conveyor.transport.data_channel import Attempt, DataSocket
from conveyor.transport.wire import BatchAssembler
from conveyor.v1 import service_pb2

Batch = tuple[TensorList, ...]


class Scheduler(Protocol):
    """What a worker tells the fan-in."""

    @property
    def client(self) -> Cluster: ...

    def arrived(self, worker: Worker, index: int, batch: Batch,
                opens_source_epoch: bool = False) -> None: ...

    def lost(self, worker: Worker, error: errors.ConveyorError) -> None: ...


def digest(batch: Batch) -> bytes:
    """A digest of every byte of ``batch`` (two copies of one batch are compared by it)."""
    h = hashlib.blake2b(digest_size=16)
    for out in batch:
        for sample in out:
            h.update(np.ascontiguousarray(sample).reshape(-1).view(np.uint8).data)
    return h.digest()


class Worker:
    """One server computing for the fan-in: its call, the indices it was asked."""

    def __init__(self, fan: Scheduler, address: str) -> None:
        self.fan = fan
        self.address = address
        self.outstanding: dict[int, float] = {}
        self.cancelled: set[int] = set()
        self.suspect = False
        self.alive = True
        self.delivered = 0
        self.last_answer = time.monotonic()
        #: Its time per batch (seconds, a moving average), once measured.
        self.per_batch: float | None = None
        self._requests: queue.SimpleQueue[service_pb2.ComputeBatchesRequest | None] = \
            queue.SimpleQueue()
        self._call: grpc.Call | None = None
        self._data: DataSocket | None = None
        #: Its data channel's attach, which ``stop`` aborts.
        self._attempt = Attempt()
        self._start: service_pb2.ComputeStart | None = None
        #: Held while a request is queued with the change it makes to ``outstanding``, so
        #: that a call started again asks exactly what is outstanding.
        self._lock = threading.Lock()

    @property
    def data_channel(self) -> bool:
        """Whether its call receives the batches' bytes on a data channel."""
        return self._data is not None

    def start(self, name: str, blob: bytes) -> None:
        connection = self.fan.client.connection(self.address)
        self._start = service_pb2.ComputeStart(
            name=name, checkpoint=blob, data_channel=connection.wants_data_channel)
        self._requests.put(service_pb2.ComputeBatchesRequest(start=self._start))
        self._call = connection.compute(self._request_iter(self._requests))
        threading.Thread(target=self._read, name=f"conveyor-fan-in {self.address}",
                         daemon=True).start()

    @staticmethod
    def _request_iter(requests: queue.SimpleQueue[service_pb2.ComputeBatchesRequest | None]
                      ) -> Iterator[service_pb2.ComputeBatchesRequest]:
        while True:
            request = requests.get()
            if request is None:
                return
            yield request

    def ask(self, first: int, count: int) -> None:
        now = time.monotonic()
        if not self.outstanding:
            self.last_answer = now  # its silence counts from here
        with self._lock:
            for index in range(first, first + count):
                self.outstanding[index] = now
            self._requests.put(service_pb2.ComputeBatchesRequest(
                compute=service_pb2.ComputeRange(first=first, count=count)))

    def cancel(self, index: int) -> None:
        with self._lock:
            if self.outstanding.pop(index, None) is not None:
                self.cancelled.add(index)
                self._requests.put(service_pb2.ComputeBatchesRequest(cancel=index))

    def stop(self) -> None:
        self.alive = False
        with self._lock:
            self._requests.put(None)
            call, data = self._call, self._data
        if call is not None:
            call.cancel()
        self._attempt.abort()
        if data is not None:
            data.abort()

    def _attach(self) -> Iterator[bytes]:
        """The call's frames, once its data channel is attached (if it asked for one);
        a channel that cannot be attached: the call again without one."""
        assert self._call is not None and self._start is not None
        if not self._start.data_channel:
            return self._call
        connection = self.fan.client.connection(self.address)
        attached = connection.attach(self._call, self._attempt)
        if attached is not None:
            frames, self._data = attached
            return frames
        with self._lock:  # again, without: the start, then every index outstanding
            if not self.alive:
                return iter(())
            self._requests.put(None)
            old = self._call
            self._start.data_channel = False
            self._requests = queue.SimpleQueue()
            self._requests.put(service_pb2.ComputeBatchesRequest(start=self._start))
            for index in sorted(self.outstanding):
                self._requests.put(service_pb2.ComputeBatchesRequest(
                    compute=service_pb2.ComputeRange(first=index, count=1)))
            self._call = connection.compute(self._request_iter(self._requests))
        old.cancel()
        return self._call

    def _read(self) -> None:
        try:
            frames = self._attach()
            assembler = BatchAssembler(None, f"worker {self.address}", self._data)
            for frame in frames:
                batch = assembler.feed(frame)
                if batch is not None:
                    self.fan.arrived(self, assembler.index, batch,
                                     assembler.opens_source_epoch)
            error: errors.ConveyorError = errors.Unavailable(
                f"worker {self.address} ended its call")
        except grpc.RpcError as exc:
            error = error_of(exc)
        except errors.ConveyorError as exc:
            error = exc
        finally:
            if self._data is not None:
                self._data.close()
        self.fan.lost(self, error)
