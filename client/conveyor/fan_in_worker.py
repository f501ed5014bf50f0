"""One server computing for a fan-in (``fan_in.py``): its ``ComputeBatches`` call, the
indices it was asked and has not delivered, and how fast it answers.

The call's requests go through a queue (the start, then ranges and cancellations, sent as
the scheduler decides); its frames are read on a daemon thread of its own, which hands each
batch, and the call's end, to the scheduler.
"""

from __future__ import annotations

import hashlib
import queue
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

import grpc
import numpy as np

from conveyor import errors
from conveyor.connection import error_of
from conveyor.tensor_list import TensorList
from conveyor.v1 import service_pb2
from conveyor.wire import BatchAssembler

if TYPE_CHECKING:
    from conveyor.client import Client

Batch = tuple[TensorList, ...]


class Scheduler(Protocol):
    """What a worker tells the fan-in."""

    @property
    def client(self) -> Client: ...

    def arrived(self, worker: Worker, index: int, batch: Batch) -> None: ...

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

    def start(self, name: str, blob: bytes) -> None:
        self._requests.put(service_pb2.ComputeBatchesRequest(
            start=service_pb2.ComputeStart(name=name, checkpoint=blob)))
        self._call = self.fan.client.connection(self.address).compute(self._request_iter())
        threading.Thread(target=self._read, name=f"conveyor-fan-in {self.address}",
                         daemon=True).start()

    def _request_iter(self) -> Iterator[service_pb2.ComputeBatchesRequest]:
        while True:
            request = self._requests.get()
            if request is None:
                return
            yield request

    def ask(self, first: int, count: int) -> None:
        now = time.monotonic()
        if not self.outstanding:
            self.last_answer = now  # its silence counts from here
        for index in range(first, first + count):
            self.outstanding[index] = now
        self._requests.put(service_pb2.ComputeBatchesRequest(
            compute=service_pb2.ComputeRange(first=first, count=count)))

    def cancel(self, index: int) -> None:
        if self.outstanding.pop(index, None) is not None:
            self.cancelled.add(index)
            self._requests.put(service_pb2.ComputeBatchesRequest(cancel=index))

    def stop(self) -> None:
        self.alive = False
        self._requests.put(None)
        if self._call is not None:
            self._call.cancel()

    def _read(self) -> None:
        assembler = BatchAssembler(None, f"worker {self.address}")
        try:
            for frame in self._call:  # type: ignore[union-attr]
                batch = assembler.feed(frame)
                if batch is not None:
                    self.fan.arrived(self, assembler.index, batch)
            error: errors.ConveyorError = errors.Unavailable(
                f"worker {self.address} ended its call")
        except grpc.RpcError as exc:
            error = error_of(exc)
        except errors.ConveyorError as exc:
            error = exc
        self.fan.lost(self, error)
