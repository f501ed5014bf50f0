"""Three errors a newcomer meets, said in their words with the next step: bytes passed as a
checkpoint that are none, a server that is down (from Python), and a Redis that does not
answer when a server starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import conveyor
from conveyor import errors
from conveyor_server.demo.run import rotate_pipeline
from tests.support.servers import Start, client

NOT_A_CHECKPOINT = "bytes are not a Conveyor checkpoint"
PASS = "pass checkpoint= the bytes a Conveyor pipeline's checkpoint() returned, unchanged"


@pytest.mark.parametrize("garbage", [b"garbage", b"\x00" * 16, b"{'dali': 1}"])
def test_bytes_that_are_no_checkpoint_say_so_and_what_to_pass(image_root: Path,
                                                              garbage: bytes) -> None:
    pipe = rotate_pipeline(str(image_root / "imgs"), batch_size=2, checkpoint=garbage)
    with pytest.raises(errors.CorruptCheckpoint) as raised:
        pipe.build()
    message = str(raised.value)
    assert f"these {len(garbage)} {NOT_A_CHECKPOINT}" in message and PASS in message
    assert "SealedCheckpoint" not in message and "Wire format" not in message
    assert "a DALI pipeline's checkpoint is not one" in message


def test_a_server_says_the_same_of_bytes_given_to_restore(start_server: Start,
                                                          image_root: Path) -> None:
    server = start_server()
    with client(server) as c, pytest.raises(errors.CorruptCheckpoint) as raised:
        c.restore("p", b"garbage", spec=rotate_pipeline(str(image_root / "imgs"),
                                                        batch_size=2))
    assert NOT_A_CHECKPOINT in str(raised.value) and PASS in str(raised.value)


def test_a_server_that_is_down_is_asked_about_in_the_users_words(image_root: Path) -> None:
    with conveyor.Client("127.0.0.1:1", timeout=5) as c, \
            pytest.raises(errors.Unavailable) as raised:
        c.open("nowhere", rotate_pipeline(str(image_root / "imgs"), batch_size=2))
    message = str(raised.value)
    assert message.startswith("server 127.0.0.1:1 failed while opening a pipeline: nothing "
                              "answers there: is it running? is the address right?"), message
    assert "JoinJob" not in message and "CreatePipeline" not in message


def test_a_redis_that_does_not_answer_at_start_says_what_to_check(tmp_path: Path) -> None:
    """It says at once that it tries again (a failover may be under way), and what to
    check once the window ran out (1 s here, 15 s by default)."""
    done = subprocess.run(
        [sys.executable, "-m", "conveyor_server.app.main", "--host", "127.0.0.1", "--port",
         "0", "--redis-url", "redis://127.0.0.1:1/0", "--data-root", str(tmp_path)],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "CONVEYOR_REDIS_FAILOVER_S": "1"})
    assert done.returncode == 2, done.stderr
    assert ("Redis at redis://127.0.0.1:1/0 failed ping (ConnectionError: "
            in done.stderr), done.stderr
    assert "trying again as the primary changes, for up to 1.0 s (redis.failover_s)" \
        in done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("conveyor-server: Redis at redis://127.0.0.1:1/0 is unreachable "
                            "(ping)"), error
    assert "Check the URL's host, port, database and password" in error
    assert "that a redis-server runs there" in error
    assert "--redis-url, CONVEYOR_REDIS_URL or redis.url" in error
    assert "or leave it out and this server starts a private Redis of its own" in error
