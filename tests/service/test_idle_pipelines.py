"""A pipeline no consumer uses is released by its server after ``limits.idle_release_s``
(its checkpoints stay, so a later ``open`` resumes it where its trainer stood); the CLI
shows how long each has been idle, and a full server names its idle pipelines and the next
step. Real servers on loopback; the release is waited for with a deadline."""

from __future__ import annotations

from pathlib import Path

import pytest

from conveyor import errors
from conveyor.cli import main as cli
from conveyor_server.demo.run import rotate_pipeline
from tests.support.resume import batch_bytes, reference
from tests.support.servers import Start, client, wait_for


def test_an_idle_pipeline_is_released_and_a_later_open_resumes_it(
        start_server: Start, image_root: Path) -> None:
    server = start_server(env={"CONVEYOR_LIMITS_IDLE_RELEASE_S": "0.5"})
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    expected = reference(spec, 5)
    with client(server) as c:
        pipe = c.open("finished", spec, run_id="r")
        assert [batch_bytes(pipe.run()) for _ in range(3)] == expected[:3]
        pipe.close()  # the trainer is done: no consumer from now on

        # Released: no longer hosted (described from Redis, by its newest checkpoint)
        wait_for(lambda: c.pipeline("finished").spec_checkpoint != "",
                 "the idle pipeline's release")
        assert "released idle pipeline finished" in server.log()
        assert any(ck.batches == 3 for ck in c.checkpoints("finished")), \
            "released at its consumer's position"

        again = c.open("finished", spec, run_id="r")
        assert again.consumed == 3
        assert [batch_bytes(again.run()) for _ in range(2)] == expected[3:5]
        again.close()


def test_the_cli_shows_idle_time_and_a_full_server_names_its_idle_pipelines(
        start_server: Start, image_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = start_server("--max-pipelines", "2")  # the default: released after an hour
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    with client(server) as c:
        done = c.open("done", spec)
        done.run()
        done.close()
        busy = c.open("busy", spec)
        busy.run()  # its stream stays attached
        wait_for(lambda: not c.pipeline("done").streaming, "the closed stream's end")

        assert cli(["--server", server.address, "pipelines"]) == 0
        table = capsys.readouterr().out.splitlines()
        assert "IDLE" in table[0].split()
        rows = {line.split()[0]: line for line in table[1:] if line.strip()}
        assert " s " in rows["done"], rows["done"]  # idle for some seconds
        assert rows["busy"].split()[5] == "-", rows["busy"]  # a consumer is attached
        assert cli(["--server", server.address, "describe", "done"]) == 0
        assert "idle:" in capsys.readouterr().out

        with pytest.raises(errors.ResourceExhausted) as full:
            c.open("third", spec)
        message = str(full.value)
        assert "this server hosts 2 pipelines, its limit (limits.max_pipelines = 2)" in message
        assert "1 of them have no consumer: 'done' (" in message and "'busy'" not in message
        assert "conveyor delete NAME" in message
        assert "after 3600 s without a consumer (limits.idle_release_s)" in message
        busy.close()


def test_a_pipeline_without_checkpointing_is_released_with_its_name(
        start_server: Start, image_root: Path) -> None:
    server = start_server(env={"CONVEYOR_LIMITS_IDLE_RELEASE_S": "0.5"})
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2,
                           enable_checkpointing=False)
    with client(server) as c:
        pipe = c.open("scratch", spec)
        pipe.run()
        pipe.close()
        wait_for(lambda: "scratch" not in {i.name for i in c.pipelines()},
                 "the idle pipeline's release")
        fresh = c.open("scratch", spec)  # the name is free: created again, at batch 0
        assert fresh.consumed == 0
        fresh.close()
