"""The consumer's acknowledgements: cumulative, at most one per interval, never lost.

``_Acknowledgements.requests()`` is what gRPC's request thread iterates for a stream; here
a thread iterates it the same way, so the tests see exactly the messages a server would.
"""

from __future__ import annotations

import threading
import time

import pytest

from conveyor.transport.acknowledgements import ACK_INTERVAL_S
from conveyor.transport.acknowledgements import Acknowledgements as _Acknowledgements
from conveyor.v1 import service_pb2


class Drain:
    """Iterate ``requests()`` on a thread, recording each message and when it came."""

    def __init__(self, acks: _Acknowledgements) -> None:
        self.got: list[tuple[float, service_pb2.StreamBatchesRequest]] = []
        self._thread = threading.Thread(target=self._run, args=(acks,), daemon=True)
        self._thread.start()

    def _run(self, acks: _Acknowledgements) -> None:
        for request in acks.requests():
            self.got.append((time.monotonic(), request))

    def counts(self) -> list[int]:
        return [r.consumed for _, r in self.got[1:]]

    def join(self) -> None:
        self._thread.join(5)
        assert not self._thread.is_alive(), "requests() did not end after close()"


def wait_until(predicate, what: str, timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


def test_the_first_request_names_the_pipeline_and_its_position() -> None:
    acks = _Acknowledgements("p", 7)
    drain = Drain(acks)
    acks.close()
    drain.join()
    assert [(r.name, r.consumed) for _, r in drain.got] == [("p", 7)]


def test_a_fast_consumer_sends_few_increasing_acknowledgements_ending_at_its_count() -> None:
    acks = _Acknowledgements("p", 0)
    drain = Drain(acks)
    start = time.monotonic()
    for consumed in range(1, 20_001):
        acks.advance(consumed)
        if consumed % 500 == 0:
            time.sleep(0.001)  # a consumer that takes a little time per batch
    wait_until(lambda: drain.counts()[-1:] == [20_000], "the newest count")
    elapsed = time.monotonic() - start
    counts = drain.counts()
    assert counts == sorted(set(counts)), counts
    # One message per interval at the most (plus the first): never one per batch.
    assert len(counts) <= elapsed / ACK_INTERVAL_S + 2, (len(counts), elapsed)
    acks.close()
    drain.join()
    assert drain.counts()[-1] == 20_000


def test_a_count_after_an_idle_spell_is_sent_within_about_an_interval() -> None:
    acks = _Acknowledgements("p", 3)
    drain = Drain(acks)
    time.sleep(5 * ACK_INTERVAL_S)  # idle: nothing is sent while nothing moves
    assert drain.counts() == []
    before = time.monotonic()
    acks.advance(4)
    wait_until(lambda: drain.counts() == [4], "the acknowledgement of batch 4")
    assert drain.got[-1][0] - before < ACK_INTERVAL_S + 0.5
    acks.close()
    drain.join()
    assert drain.counts() == [4]  # closing sends nothing that was sent already


def test_closing_sends_the_newest_count_without_waiting_for_the_interval(
        monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)  # no other thread runs in this test
    acks = _Acknowledgements("p", 0)
    requests = acks.requests()  # driven by hand, as gRPC's request thread drives it
    next(requests)
    acks.advance(1)
    assert next(requests).consumed == 1
    assert slept == [ACK_INTERVAL_S]  # an open stream gathers counts for one interval
    acks.advance(2)
    acks.advance(3)
    acks.close()
    assert [r.consumed for r in requests] == [3]
    assert slept == [ACK_INTERVAL_S]  # a closing one sends at once


def test_close_can_wait_until_the_last_count_is_sent() -> None:
    acks = _Acknowledgements("p", 0)
    drain = Drain(acks)
    acks.advance(5)
    acks.close(wait=5.0)  # returns once requests() has ended, its last count yielded
    assert drain.counts() == [5]
    drain.join()


def test_a_count_recorded_while_the_previous_one_is_sent_is_not_lost_at_close() -> None:
    acks = _Acknowledgements("p", 0)
    requests = acks.requests()  # driven by hand, as gRPC's request thread drives it
    assert next(requests).name == "p"
    acks.advance(1)
    assert next(requests).consumed == 1
    # gRPC is now sending that acknowledgement: the generator waits at its yield while the
    # trainer consumes one more batch and closes the stream.
    acks.advance(2)
    acks.close()
    assert [r.consumed for r in requests] == [2]
