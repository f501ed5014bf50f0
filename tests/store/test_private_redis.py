"""The private Redis a server starts without ``--redis-url`` belongs to that server: it ends
when the server ends, also on ``kill -9``; one server at a time runs it in a state
directory; a Redis left running there by a server that is gone is shut down cleanly and its
data taken over; the data survives restarts. Real servers, real redis-servers."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

from conveyor.errors import Unavailable
from conveyor_server.demo.run import rotate_pipeline
from conveyor_server.demo.sample_data import make_image_folder
from conveyor_server.store.owner_lock import DirectoryInUse
from conveyor_server.store.parent_death import LOST_PARENT, bound_command
from conveyor_server.store.redis_process import RedisProcess, find_redis_server
from tests.support.servers import ServerProcess, client

#: How long a redis-server may take to notice its server died and exit.
EXIT_WITHIN_S = 5.0


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    make_image_folder(root / "imgs", counts=(3, 3))
    return root


def embedded_server(state: Path, root: Path, log_dir: Path) -> ServerProcess:
    return ServerProcess(None, [root], log_dir, "--state-dir", str(state)).start()


def redis_pid(socket_path: Path) -> int:
    """The pid of the redis-server answering on ``socket_path``."""
    probe = redis.Redis(unix_socket_path=str(socket_path), socket_timeout=2)
    try:
        return int(probe.info("server")["process_id"])
    finally:
        probe.close()


def running(pid: int) -> bool:
    """Whether ``pid`` is a process that still runs (a zombie has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def wait_until_ended(pid: int, timeout: float = EXIT_WITHIN_S) -> float:
    """Seconds until ``pid`` ended; fails the test if it still runs after ``timeout``."""
    start = time.monotonic()
    while running(pid):
        if time.monotonic() - start > timeout:
            raise AssertionError(f"redis-server {pid} still runs {timeout}s later")
        time.sleep(0.02)
    return time.monotonic() - start


def test_kill_9_of_the_server_ends_its_redis_and_a_restart_keeps_the_data(
    tmp_path: Path, data_root: Path,
) -> None:
    state = tmp_path / "state"
    first = embedded_server(state, data_root, tmp_path)
    try:
        pid = redis_pid(state / "redis" / "redis.sock")
        with client(first) as c:
            pipe = c.create("crash", rotate_pipeline(str(data_root / "imgs"), batch_size=2))
            pipe.run()
            ckpt = pipe.checkpoint()
            expected = pipe.run()
        first.kill()
        wait_until_ended(pid)
    finally:
        first.stop()
    second = embedded_server(state, data_root, tmp_path)
    try:
        assert redis_pid(state / "redis" / "redis.sock") != pid
        assert "left running" not in second.log()  # nothing was left to take over
        with client(second) as c:
            assert ckpt.id in [k.id for k in c.checkpoints("crash")]
            got = c.restore("crash", checkpoint=ckpt.id).run()
            assert [s.tobytes() for s in got[0]] == [s.tobytes() for s in expected[0]]
    finally:
        second.stop()


def test_a_second_server_on_the_same_state_dir_is_refused_and_sigterm_ends_redis(
    tmp_path: Path, data_root: Path,
) -> None:
    state = tmp_path / "state"
    first = embedded_server(state, data_root, tmp_path)
    try:
        assert first.proc is not None
        pid = redis_pid(state / "redis" / "redis.sock")
        second = subprocess.run(
            [sys.executable, "-m", "conveyor_server.app.main", "--host", "127.0.0.1",
             "--port", "0", "--state-dir", str(state), "--data-root", str(data_root)],
            capture_output=True, text=True, timeout=60, check=False,
            env={k: v for k, v in os.environ.items() if k != "CONVEYOR_REDIS_URL"})
        assert second.returncode == 2, second.stdout + second.stderr
        assert "listening on" not in second.stdout
        lines = [x for x in second.stderr.splitlines() if x.startswith("conveyor-server: ")]
        assert lines == [
            f"conveyor-server: state_dir: {state} holds the private Redis of another "
            f"process (pid {first.proc.pid}), which still runs: stop that conveyor-server, "
            "give this one its own --state-dir, or run both against one shared Redis with "
            "--redis-url"], second.stderr
        assert redis_pid(state / "redis" / "redis.sock") == pid  # untouched
        with client(first) as c:
            c.create("still-serving", rotate_pipeline(str(data_root / "imgs"), batch_size=2))
        assert first.terminate() == 0
        wait_until_ended(pid)
    finally:
        first.stop()
    assert not (state / "redis" / "redis.sock").exists()  # a clean shutdown removes it


def start_unowned_redis(directory: Path) -> subprocess.Popen[bytes]:
    """A redis-server on ``directory``'s files that holds no lock there, as the private
    Redis of a server that is gone does."""
    directory.mkdir(parents=True)
    socket_path = directory / "redis.sock"
    orphan = subprocess.Popen(
        [find_redis_server(), "--port", "0", "--unixsocket", str(socket_path),
         "--dir", str(directory), "--save", "", "--appendonly", "yes",
         "--appendfsync", "always", "--logfile", str(directory / "redis.log")],
        stdin=subprocess.DEVNULL)
    # Answering, not only its socket file there: Redis binds the file before it listens,
    # and a redis-server stopped in between refuses connections as a file left behind does.
    probe = redis.Redis(unix_socket_path=str(socket_path), socket_timeout=2)
    deadline = time.monotonic() + 10
    try:
        while True:
            try:
                if probe.ping():
                    return orphan
            except (redis.ConnectionError, redis.BusyLoadingError):
                pass
            assert time.monotonic() < deadline, "the unowned redis-server did not start"
            time.sleep(0.01)
    finally:
        probe.close()


def test_a_redis_left_running_by_a_gone_server_is_shut_down_and_its_data_taken_over(
    tmp_path: Path, data_root: Path,
) -> None:
    """As a server of a version without the lock, or on a system without a parent-death
    signal, leaves it: a redis-server of no living owner on the directory's files."""
    state = tmp_path / "state"
    directory = state / "redis"
    socket_path = directory / "redis.sock"
    orphan = start_unowned_redis(directory)
    try:
        probe = redis.Redis(unix_socket_path=str(socket_path), socket_timeout=2)
        probe.set("written-before", "kept")
        probe.close()
        server = embedded_server(state, data_root, tmp_path)
        try:
            assert orphan.wait(EXIT_WITHIN_S) == 0  # SHUTDOWN: a clean exit
            assert (f"a redis-server (pid {orphan.pid}) left running by a process that is "
                    f"gone still served {directory}") in server.log()
            probe = redis.Redis(unix_socket_path=str(socket_path), socket_timeout=2)
            assert probe.get("written-before") == b"kept"
            assert int(probe.info("server")["process_id"]) != orphan.pid
            probe.close()
            with client(server) as c:
                c.create("after", rotate_pipeline(str(data_root / "imgs"), batch_size=2))
        finally:
            server.stop()
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()


def test_one_redis_process_per_directory_and_the_lock_names_its_holder(tmp_path: Path) -> None:
    with RedisProcess(tmp_path / "redis", appendonly=True) as first:
        second = RedisProcess(tmp_path / "redis", appendonly=True)
        with pytest.raises(DirectoryInUse) as refused:
            second.start()
        assert refused.value.holder_pid == os.getpid()
        assert refused.value.message.startswith(
            f"{tmp_path / 'redis'} is in use by process {os.getpid()}")
        assert not second.running and first.running
        record = json.loads((tmp_path / "redis" / "owner.lock").read_text())
        assert record == {"pid": os.getpid(), "redis_pid": redis_pid(first.socket)}
    # Released with the process: the next one starts on the same files.
    with RedisProcess(tmp_path / "redis", appendonly=True) as again:
        assert again.running


def test_a_child_whose_parent_died_before_it_was_bound_does_not_run(tmp_path: Path) -> None:
    """The race ``prctl`` alone leaves open: the parent died between the start and the
    bind. Played by naming a parent that is not the launcher's."""
    marker = tmp_path / "ran"
    command = bound_command(["/bin/sh", "-c", f"touch {marker}"],
                            expected_parent=os.getpid() + 1_000_000)
    assert command is not None
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == LOST_PARENT, done.stderr
    assert "ended before /bin/sh was bound to it: not started" in done.stderr
    assert not marker.exists()


def test_the_launcher_runs_the_program_in_its_place(tmp_path: Path) -> None:
    """Same pid (exec, not a child of its own), the arguments passed on as given."""
    command = bound_command(["/bin/sh", "-c", 'echo "$$ $0 $1"', "first", "second arg"])
    assert command is not None
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert out.strip() == f"{proc.pid} first second arg"


def test_a_left_redis_that_does_not_answer_is_refused_not_replaced(tmp_path: Path) -> None:
    directory = tmp_path / "redis"
    orphan = start_unowned_redis(directory)
    try:
        orphan.send_signal(signal.SIGSTOP)  # alive, holding the socket, answering nothing
        proc = RedisProcess(directory, appendonly=True)
        with pytest.raises(Unavailable) as unrecorded:
            proc.start()
        assert unrecorded.value.message == (
            f"a redis-server (pid unknown) left running by a process that is gone holds "
            f"{directory / 'redis.sock'} but does not answer: end it (kill its pid) and "
            "start again")
        assert not proc.running
        # As its owner recorded it, and still that redis-server: the message names it.
        (directory / "owner.lock").write_text(json.dumps({"pid": 1, "redis_pid": orphan.pid}))
        with pytest.raises(Unavailable) as recorded:
            proc.start()
        assert recorded.value.message.startswith(f"a redis-server (pid {orphan.pid}) left ")
        assert recorded.value.message.endswith(f"end it (kill {orphan.pid}) and start again")
        orphan.send_signal(signal.SIGCONT)
        assert orphan.poll() is None  # left alone
        # The refusals released the directory: once the operator ended it, a start works.
        orphan.terminate()
        orphan.wait(10)
        with RedisProcess(directory, appendonly=True) as again:
            assert again.running
    finally:
        if orphan.poll() is None:
            orphan.kill()  # SIGKILL ends a stopped process too
        orphan.wait()


def test_a_redis_started_from_another_thread_outlives_that_thread(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """The parent-death signal follows the thread that forked: a Redis started from a
    short-lived thread is not bound (it would die with the thread), and says so."""
    proc = RedisProcess(tmp_path / "redis", appendonly=True)
    with caplog.at_level(logging.WARNING, logger="conveyor.server"):
        starter = threading.Thread(target=proc.start)
        starter.start()
        starter.join()
    try:
        assert "started from a thread other than the main one" in caplog.text
        # The kernel sends a parent-death signal as the thread's task goes; Redis acts on
        # a SIGTERM in its next cron round (every 100 ms): three rounds' time after that.
        task = Path(f"/proc/self/task/{starter.native_id}")
        while task.exists():
            time.sleep(0.01)
        time.sleep(0.3)
        assert proc.running, (tmp_path / "redis" / "redis.log").read_text()
        assert "SIGTERM" not in (tmp_path / "redis" / "redis.log").read_text()
        assert redis_pid(proc.socket) > 0
    finally:
        proc.cleanup()
