"""What a stream may hold of the server: a slot among ``max_streams``, and the time it may
take to name its pipeline.

Every stream holds one of the server's RPC threads for its whole life, so the pool has
``max_streams`` threads for streams plus ``UNARY_THREADS`` that streams can never take:
unary RPCs and health checks always find a thread. A stream beyond the cap is refused with
RESOURCE_EXHAUSTED naming the limit; one that does not send its first message within
``first_message_s`` is cancelled, so idle openers cannot hold the slots.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import grpc

from conveyor.errors import InvalidArgument, ResourceExhausted
from conveyor.v1 import service_pb2

log = logging.getLogger("conveyor.server")
#: RPC threads kept for unary calls and health checks, beyond the streams' own.
UNARY_THREADS = 16
FIRST_MESSAGE_S = 10.0

Requests = Iterator[service_pb2.StreamBatchesRequest]


class StreamSlots:
    def __init__(self, max_streams: int, first_message_s: float = FIRST_MESSAGE_S) -> None:
        self.max_streams = max_streams
        self.first_message_s = first_message_s
        self._lock = threading.Lock()
        self.active = 0

    @property
    def threads(self) -> int:
        """The RPC thread pool's size."""
        return self.max_streams + UNARY_THREADS

    @contextmanager
    def slot(self) -> Iterator[None]:
        with self._lock:
            if self.active >= self.max_streams:
                raise ResourceExhausted(f"this server already serves {self.active} streams "
                                        f"(limits.max_streams = {self.max_streams}); retry, "
                                        "or use another server")
            self.active += 1
        try:
            yield
        finally:
            with self._lock:
                self.active -= 1


def first_request(requests: Requests, context: grpc.ServicerContext,
                  timeout: float) -> service_pb2.StreamBatchesRequest:
    """The stream's first message, which names the pipeline; the call is cancelled if it
    does not come within ``timeout`` seconds."""
    def give_up() -> None:
        log.warning("a stream from %s named no pipeline within %.0f s: cancelled",
                    context.peer(), timeout, extra={"peer": context.peer()})
        context.cancel()

    timer = threading.Timer(timeout, give_up)
    timer.daemon = True
    timer.start()
    try:
        first = next(requests, None)
    finally:
        timer.cancel()
    if first is None or not first.name:
        raise InvalidArgument("StreamBatches: the first message must name the pipeline")
    return first
