"""The consumer's side of a batch stream: its opening request, then acknowledgements of the
consumed count, sent from gRPC's request thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from conveyor.v1 import service_pb2

#: Acknowledgements are sent at most this often; the server's view of the consumed
#: position (for a drain, or an operator's checkpoint) trails by at most this much.
ACK_INTERVAL_S = 0.01
#: How long ``RemotePipeline.close()`` waits for the last acknowledgement to be sent
#: before it cancels the stream (cancelling drops a message gRPC has not sent yet).
ACK_FLUSH_S = 0.25


class Acknowledgements:
    """The consumer's side of a stream: the opening request, then the consumed count.

    Acknowledgements are cumulative, so only the newest count matters: it is sent at most
    once per ``ACK_INTERVAL_S``, and only when it moved. The trainer's thread records the
    count and wakes the sending thread only when that thread is waiting for news, so a fast
    stream costs a few thread wake-ups per interval instead of several per batch.
    """

    def __init__(self, name: str, consumed: int, data_channel: bool = False) -> None:
        """``data_channel``: the first request asks for a data channel."""
        self._first = service_pb2.StreamBatchesRequest(name=name, consumed=consumed,
                                                       data_channel=data_channel)
        self._consumed = consumed
        self._news = threading.Event()
        self._closed = False
        self._sent_all = threading.Event()

    def advance(self, consumed: int) -> None:
        self._consumed = consumed  # read by requests() only after it clears _news
        if not self._news.is_set():
            self._news.set()

    def close(self, wait: float = 0.0) -> bool:
        """Send the newest count (if it moved) and end the request side; wait up to
        ``wait`` seconds until gRPC has sent it. True once it has (the server then ends the
        call when it has taken the count)."""
        self._closed = True
        self._news.set()
        return self._sent_all.wait(wait) if wait else self._sent_all.is_set()

    def requests(self) -> Iterator[service_pb2.StreamBatchesRequest]:
        yield self._first
        sent = self._first.consumed
        while True:
            self._news.wait()
            if not self._closed:
                time.sleep(ACK_INTERVAL_S)  # gather what is consumed meanwhile
            self._news.clear()
            # Read after clearing the news (a close() during the sleep set news this clear
            # dropped: seen here, or its news is set again) and before the count (close()
            # comes after the last advance(), so a count read after seeing it closed is
            # the final one).
            closing = self._closed
            consumed = self._consumed
            if consumed != sent:
                sent = consumed
                yield service_pb2.StreamBatchesRequest(consumed=consumed)
            if closing:  # gRPC asked for more: what was yielded is sent
                self._sent_all.set()
                return
