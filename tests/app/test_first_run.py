"""First run: the embedded Redis default and the demo command, as a new user meets them."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from conveyor_server.demo.run import rotate_pipeline
from conveyor_server.demo.sample_data import make_image_folder
from conveyor_server.engine.data import batch_read
from conveyor_server.engine.ops.decode import batch_headers
from conveyor_server.engine.ops.geometry import area_resize
from conveyor_server.store.redis_process import RedisProcess
from tests.support.servers import ServerProcess, client


def test_server_without_redis_url_runs_a_private_persistent_redis(tmp_path: Path) -> None:
    root = tmp_path / "root"
    make_image_folder(root / "imgs", counts=(3, 3))
    state = tmp_path / "state"
    first = ServerProcess(None, [root], tmp_path, "--state-dir", str(state)).start()
    try:
        assert "started a private redis-server" in first.log()
        # The start says which computes the area resize (the compiled kernel, or OpenCV
        # where the server was installed without a C compiler), and which reads a batch's
        # image headers (the compiled walk, or Python) and a batch's files (the compiled
        # reader, or Python).
        assert f"area resize: {area_resize.KERNEL}; image headers: {batch_headers.WALK}" \
            in first.log()
        assert f"a batch's files read by: {batch_read.READER}" in first.log()
        with client(first) as c:
            pipe = c.create("embedded", rotate_pipeline(str(root / "imgs"), batch_size=2))
            pipe.run()
            ckpt = pipe.checkpoint()
            expected = pipe.run()
    finally:
        first.stop()
    assert first.proc is not None and first.proc.returncode == 0, first.log()
    socket_path = state / "redis" / "redis.sock"
    # One attempt: redis-py's default retries a refused connection with backoff (~4 s).
    probe = redis.Redis(unix_socket_path=str(socket_path), socket_timeout=1,
                        retry=Retry(NoBackoff(), 0))
    try:
        probe.ping()
        raise AssertionError("the private redis-server outlived its conveyor-server")
    except (redis.ConnectionError, FileNotFoundError):
        pass
    finally:
        probe.close()
    second = ServerProcess(None, [root], tmp_path, "--state-dir", str(state)).start()
    try:
        with client(second) as c:
            kept = c.checkpoints("embedded")  # at creation, ours, the SIGTERM drain's
            assert kept[1].id == ckpt.id and len(kept) == 3
            restored = c.restore("embedded", checkpoint=ckpt.id)
            got = restored.run()
            assert [s.tobytes() for s in got[0]] == [s.tobytes() for s in expected[0]]
    finally:
        second.stop()


def run_demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conveyor_server.demo.run", *args],
                          capture_output=True, text=True, timeout=180, check=False)


def test_demo_prints_an_exact_match_and_writes_the_png(tmp_path: Path) -> None:
    result = run_demo("--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "exact match" in result.stdout
    assert "labels: identical   angles: identical   images: 8/8 identical" in result.stdout
    png = tmp_path / "out" / "restored_batch.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_demo_with_a_missing_data_set_fails_with_one_clear_line(tmp_path: Path) -> None:
    result = run_demo("--out", str(tmp_path / "out"), "--data", str(tmp_path / "nope"))
    assert result.returncode == 2
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "does not exist" in lines[0], result.stderr


def test_demo_without_a_free_port_fails_clearly_and_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_demo("--out", str(tmp_path / "out"), "--ports", f"{port},0")
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and f"did not start on port {port}" in lines[0], result.stderr
    leftovers = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True,
                               check=False)
    assert leftovers.stdout.strip() == "", f"processes left behind: {leftovers.stdout}"


def test_private_redis_in_a_relative_state_dir(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The default state dir (.conveyor) is relative to where the server starts."""
    monkeypatch.chdir(tmp_path)
    with RedisProcess(Path(".conveyor") / "redis", appendonly=True) as proc:
        assert proc.directory == tmp_path / ".conveyor" / "redis"
        client = redis.Redis(unix_socket_path=str(proc.socket), socket_timeout=2)
        assert client.ping()
        client.close()
