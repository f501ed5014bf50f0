"""Ending a client's use is bounded in time, whatever became of its server and Redis.

A trainer process (``tests/support/close_child.py``) takes batches from a real server; the test
then leaves the server up, drains it (SIGTERM), freezes it (SIGSTOP) or kills it
(SIGKILL), with Redis up or gone; the trainer ends its use of the client one way or
another (a generator finalised at interpreter exit, ``close()``, ``__exit__``, a close from
a gRPC done-callback, no close at all) and must have exited within ``EXIT_WITHIN_S``.
In-process, ``Client.close()`` returns at once and leaves no gRPC thread and no socket to
the server behind."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

import conveyor
from conveyor.remote.cluster import close_at_exit
from conveyor.transport import acknowledgements
from conveyor.transport.acknowledgements import Acknowledgements
from conveyor.transport.connection import CLOSE_WAIT_S
from conveyor.v1 import service_pb2
from conveyor_server.demo.run import rotate_pipeline
from conveyor_server.store.redis_process import RedisProcess
from tests.support.servers import ServerProcess, Start

ROOT = Path(__file__).resolve().parents[3]
#: The longest a trainer may take from "go on" to its exit (about 2 s here, most of it
#: the interpreter's teardown of torch; a hang is forever).
EXIT_WITHIN_S = 15.0
#: The longest an in-process ``close()`` may take: far below ``CLOSE_WAIT_S``, so a close
#: that only ended because its wait ran out fails.
CLOSED_WITHIN_S = 1.5


def read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "the trainer said nothing"
    return proc.stdout.readline().strip()


def thread_dump(proc: subprocess.Popen[str]) -> str:
    """The stacks of a trainer that did not exit (it dumps them on SIGUSR1, see
    ``close_child.py``), and what else it wrote; the trainer is killed."""
    proc.send_signal(signal.SIGUSR1)
    try:
        out, err = proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return f"{err[-6000:]}\n(stdout: {out!r})"


@pytest.fixture
def frozen() -> Iterator[list[ServerProcess]]:
    """Servers the test stopped (SIGSTOP): woken again at the end, so they can be stopped."""
    stopped: list[ServerProcess] = []
    try:
        yield stopped
    finally:
        for server in stopped:
            assert server.proc is not None
            server.proc.send_signal(signal.SIGCONT)


def befall(server: ServerProcess, fate: str, stopped: list[ServerProcess]) -> None:
    """Leave the server ``alive``, or drain it (``drained``: SIGTERM, then its exit),
    freeze it (``stopped``: SIGSTOP) or kill it (``killed``: SIGKILL)."""
    assert server.proc is not None
    if fate == "drained":
        assert server.terminate() == 0
    elif fate == "stopped":
        server.proc.send_signal(signal.SIGSTOP)
        stopped.append(server)
    elif fate == "killed":
        server.kill()
    else:
        assert fate == "alive"


# (way, server's fate, Redis's fate). The first six hung forever before this fix (in
# grpc.Channel.close, waiting for gRPC threads that were stopped or were the closing
# thread itself); the others are there so that no way of ending regresses.
CASES = [
    ("loader-exit", "alive", "up"),
    ("loader-exit", "drained", "gone"),  # the report: 4 batches, SIGTERM, Redis gone
    ("loader-exit", "stopped", "up"),
    ("generator-exit", "drained", "up"),
    ("callback-close", "alive", "up"),
    ("callback-close", "drained", "gone"),
    ("loader-exit", "killed", "gone"),
    ("loader-del", "drained", "gone"),
    ("dataset-close", "stopped", "up"),
    ("client-with", "stopped", "up"),
    ("client-close", "killed", "up"),
    ("pipe-close", "drained", "gone"),
    ("client-exit", "stopped", "up"),
    # A gRPC thread stopped by the interpreter's exit while it held its call's lock: the
    # generator's finaliser, cancelling the call, waited for that lock forever (a rare
    # hang of loader-exit, whichever gRPC thread was mid-call as the exit began).
    ("loader-exit-held", "alive", "up"),
]


@pytest.mark.parametrize(("way", "fate", "redis_fate"), CASES)
def test_a_trainer_process_exits_whatever_became_of_its_server(
        start_server: Start, redis_proc: RedisProcess, image_root: Path,
        frozen: list[ServerProcess], way: str, fate: str, redis_fate: str) -> None:
    # The trainer imports what it uses (torch) while the server starts, then reads the
    # server's address.
    trainer = subprocess.Popen(
        [sys.executable, "-m", "tests.support.close_child", way, str(image_root / "imgs")],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        # A drain waits its grace for the trainer's open stream, which nobody reads: how
        # long is not what these cases check, so a drained server has 1 s of it, not 10.
        server = start_server(*(("--grace", "1") if fate == "drained" else ()))
        assert trainer.stdin is not None
        trainer.stdin.write(server.address + "\n")
        trainer.stdin.flush()
        took = read_line(trainer, 120)
        assert took == "took 4", took + trainer.communicate(timeout=30)[1][-3000:]
        befall(server, fate, frozen)
        if redis_fate == "gone":
            redis_proc.kill()
        asked = time.monotonic()
        try:
            out, err = trainer.communicate("go on\n", timeout=EXIT_WITHIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the trainer ({way}, server {fate}, Redis {redis_fate}) had not "
                        f"exited {EXIT_WITHIN_S} s after its end; where its threads "
                        f"stood:\n{thread_dump(trainer)}")
        assert trainer.returncode == 0, err[-3000:]
        assert out.split() == ["ended"], out + err[-3000:]
        assert time.monotonic() - asked < EXIT_WITHIN_S
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.communicate()


# -- in-process ----------------------------------------------------------------------------


def grpc_threads() -> set[threading.Thread]:
    """The Python threads gRPC runs (a channel's spin thread, a stream's request thread)."""
    return {t for t in threading.enumerate()
            if getattr(getattr(t, "_target", None), "__module__", "") == "grpc._cython.cygrpc"}


def sockets_to(port: int) -> set[str]:
    """This process's TCP connections to ``port`` on loopback (socket inodes)."""
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            mine.add(link[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if remote_port == port and fields[9] in mine and fields[3] != "0A":
                    found.add(fields[9])
    return found


def soon(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Whether ``predicate`` holds within ``timeout`` (threads end just after a close)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.mark.parametrize("fate", ["alive", "stopped", "killed"])
@pytest.mark.parametrize("closing", ["pipeline-then-client", "client-only"])
def test_close_returns_at_once_and_leaves_no_thread_or_socket_behind(
        start_server: Start, image_root: Path, frozen: list[ServerProcess],
        fate: str, closing: str) -> None:
    """``client-only``: ``Client.close()`` ends the streams of the pipelines it handed out
    (their request threads were left waiting forever)."""
    # A stopped server, woken at the end, drains its grace for the stream the client
    # closed meanwhile: how long is not what this checks, so it has 1 s of it, not 10.
    server = start_server(*(("--grace", "1") if fate == "stopped" else ()))
    before = grpc_threads()  # (none, unless an earlier test left some)
    # (wait_serving's health-check channel is closed; gRPC lets its socket go just after)
    assert soon(lambda: not sockets_to(server.port)), sockets_to(server.port)
    client = conveyor.Client(server.address, timeout=5, failover=False)
    pipe = client.open("leftovers", rotate_pipeline(str(image_root / "imgs"), batch_size=2))
    for _ in range(3):
        pipe.run()
    connection = client.connection(server.address)
    assert grpc_threads() - before and sockets_to(server.port)  # what the checks look for
    befall(server, fate, frozen)
    started = time.monotonic()
    if closing == "pipeline-then-client":
        pipe.close()
    client.close()
    took = time.monotonic() - started
    assert took < CLOSED_WITHIN_S < CLOSE_WAIT_S, took
    assert soon(lambda: not grpc_threads() - before), grpc_threads() - before
    assert soon(lambda: not sockets_to(server.port)), sockets_to(server.port)
    with pytest.raises(ValueError, match="closed channel"):
        connection.call("ListPipelines", service_pb2.ListPipelinesRequest(), 1)


def test_the_exit_hook_closes_what_the_trainer_left_open(
        start_server: Start, image_root: Path) -> None:
    """``close_at_exit`` (the ``atexit`` hook) closes a client left open with its stream,
    while gRPC's threads still run, and sends its last acknowledgement: nothing is left for
    the interpreter's teardown to close (see ``loader-exit-held`` above)."""
    server = start_server()
    before = grpc_threads()
    assert soon(lambda: not sockets_to(server.port)), sockets_to(server.port)
    client = conveyor.Client(server.address, timeout=5, failover=False)
    pipe = client.open("left-open", rotate_pipeline(str(image_root / "imgs"), batch_size=2))
    for _ in range(3):
        pipe.run()
    assert grpc_threads() - before and sockets_to(server.port)
    started = time.monotonic()
    close_at_exit()
    assert time.monotonic() - started < CLOSED_WITHIN_S
    assert soon(lambda: not grpc_threads() - before), grpc_threads() - before
    assert soon(lambda: not sockets_to(server.port)), sockets_to(server.port)
    with conveyor.Client(server.address, timeout=5, failover=False, place=False) as asking:
        # (the server takes the count on its own thread; the stream was closed after it)
        assert soon(lambda: asking.pipeline("left-open").acknowledged == 3), \
            asking.pipeline("left-open").acknowledged


def test_a_close_during_the_acknowledgement_interval_ends_the_request_stream(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The stream's request thread waits for news, sleeps ``ACK_INTERVAL_S`` to gather
    acknowledgements, then clears the news: a close() during that sleep must still end the
    requests (its news was cleared, and the thread waited forever: one leaked thread per
    stream closed at the wrong moment)."""
    acks = Acknowledgements("p", 0)
    monkeypatch.setattr(acknowledgements, "time", SimpleNamespace(sleep=lambda _: acks.close()))
    requests = acks.requests()
    assert next(requests).consumed == 0
    acks.advance(1)
    assert next(requests).consumed == 1  # (close() came during the sleep before it)
    ended = threading.Event()

    def the_rest() -> None:
        assert list(requests) == []
        ended.set()

    threading.Thread(target=the_rest, daemon=True).start()
    assert ended.wait(5), "the request stream went on waiting after close()"
