"""How a data channel's ends meet a call's end, on real sockets: a closing caller's attach
under way is aborted at once, and a channel broken under a call that ended is that call's
end (CANCELLED), not an error (UNAVAILABLE)."""

from __future__ import annotations

import secrets
import socket
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from conveyor import errors
from conveyor.transport.data_channel import TICKET_BYTES, Attempt, Dialer
from conveyor.v1 import service_pb2
from conveyor_server.service import data_port
from conveyor_server.service.data_port import DataSink


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port whose connections the kernel accepts and nothing ever answers: a server
    stopped (SIGSTOP) between its offer and its answer looks so."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=8)
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


def offer_for(port: int) -> service_pb2.DataChannelOffer:
    return service_pb2.DataChannelOffer(ticket=secrets.token_bytes(TICKET_BYTES), port=port,
                                        expires_ms=5000)


def test_an_attach_waiting_on_a_silent_server_ends_at_once_when_aborted(
        silent_port: int) -> None:
    dialer = Dialer(f"127.0.0.1:{silent_port}", None, [], idle_s=30.0)
    attempt = Attempt()
    outcome: list[BaseException] = []

    def attach() -> None:
        try:
            dialer.attach(offer_for(silent_port), attempt)
        except BaseException as exc:  # what the caller sees
            outcome.append(exc)

    thread = threading.Thread(target=attach, daemon=True)
    thread.start()
    thread.join(0.3)
    assert thread.is_alive()  # it waits for the answer (up to its 3 s connect time)
    started = time.monotonic()
    attempt.abort()
    thread.join(2.0)
    assert not thread.is_alive()
    assert time.monotonic() - started < 1.0
    # Unavailable, not Unreachable: an abort does not turn the server's channel off.
    assert len(outcome) == 1 and type(outcome[0]) is errors.Unavailable, outcome
    assert "being closed" in str(outcome[0])


def test_an_attempt_aborted_before_it_connects_attaches_nothing(silent_port: int) -> None:
    attempt = Attempt()
    attempt.abort()
    with pytest.raises(errors.Unavailable, match="being closed"):
        Dialer(f"127.0.0.1:{silent_port}", None, [], idle_s=30.0).attach(
            offer_for(silent_port), attempt)


def big_pieces() -> list[memoryview]:
    """More than the socket buffers hold, so that a send blocks until the peer reads."""
    return [memoryview(np.zeros(8 << 20, dtype=np.uint8).data)]


def test_a_channel_broken_under_an_ended_call_ends_the_send_quietly() -> None:
    ours, theirs = socket.socketpair()
    sink = DataSink(ours, "peer")
    result: list[object] = []
    sender = threading.Thread(target=lambda: result.append(sink.send(big_pieces())),
                              daemon=True)
    sender.start()
    theirs.close()  # the caller closed its end first; its cancellation comes next
    sink.call_ended()
    sender.join(2.0)
    assert not sender.is_alive()
    assert result == [False]  # no UNAVAILABLE: the call ended, as CANCELLED
    sink.close()


def test_a_channel_broken_under_a_live_call_is_unavailable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data_port, "CALL_END_WAIT_S", 0.2)
    ours, theirs = socket.socketpair()
    sink = DataSink(ours, "peer")
    theirs.close()
    started = time.monotonic()
    with pytest.raises(errors.Unavailable, match="the data channel to peer broke"):
        sink.send(big_pieces())
    assert 0.2 <= time.monotonic() - started < 2.0  # it waited for the call's end first
    sink.close()
