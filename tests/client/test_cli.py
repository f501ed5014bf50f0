"""The ``conveyor`` command as a newcomer meets it, with real servers and a real Redis on
loopback: whether each pipeline's holder is alive, the latest checkpoint whoever wrote it,
the spec as operators and arguments, what ``stream`` measures, and errors that say what
happened and what to do next (the texts are asserted here so that they stay true)."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from conveyor.cli import main as cli
from conveyor.cli import spec_lines
from conveyor_server.demo.run import rotate_pipeline
from tests.support.servers import Start, client, wait_for

SHORT_LEASE = {"CONVEYOR_REDIS_LEASE_S": "2"}
#: The IDLE cell of ``conveyor pipelines``: "-" (a stream attached, or held by another
#: server) or how long the pipeline has had no consumer.
IDLE = r"(?:-|[0-9.]+ (?:s|min|h))"
Capture = pytest.CaptureFixture[str]


def run_cli(capsys: Capture, *args: str) -> tuple[int, str, str]:
    """Exit status, standard output and standard error of one ``conveyor`` command."""
    capsys.readouterr()
    status = cli(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def test_a_dead_holder_is_shown_with_its_latest_checkpoint_and_what_to_do(
        start_server: Start, image_root: Path, capsys: Capture) -> None:
    a, b = start_server(env=SHORT_LEASE), start_server(env=SHORT_LEASE)
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    with client(a, failover=False) as ca, client(b) as operator:
        pipe = ca.create("orphan", spec)
        pipe.run()
        pipe.run()
        saved = pipe.checkpoint().id
        status, out, _ = run_cli(capsys, "--server", b.address, "pipelines")
        assert status == 0
        assert re.search(rf"orphan\s+{re.escape(a.address)}\s+yes\s+\d+\s+-\s+{IDLE}\s+"
                         rf"{saved}", out), out
        a.kill()
        wait_for(lambda: not operator.pipeline("orphan").holder_alive, "the lease to run out")

        status, out, _ = run_cli(capsys, "--server", b.address, "pipelines")
        assert status == 0
        assert re.search(rf"orphan\s+{re.escape(a.address)}\s+no\s+\d+\s+-\s+{IDLE}\s+"
                         rf"{saved}", out), out
        assert ("orphan is held by a server that is gone (its lease on the name ran out): "
                f"resume it on a live server with `conveyor restore orphan --checkpoint "
                f"{saved}` (or a trainer's open of 'orphan'), or release the name with "
                "`conveyor delete orphan --force`") in out

        status, out, _ = run_cli(capsys, "--server", b.address, "describe", "orphan")
        assert status == 0
        assert (f"holder:        {a.address} (generation 1), NOT alive: its lease on the name "
                "ran out (the server is gone)") in out
        assert f"latest ckpt:   {saved}" in out
        assert f"spec (of its latest checkpoint, {saved}):" in out
        assert "#0 readers.file  'image_reader'  (cpu)" in out
        assert "#3 rotate  (cpu)  <- #1.0  angle=#2.0  fill_value=[0.0]" in out
        assert "batches:" not in out  # its holder is gone: nobody counts them
        assert "outputs: #3.0, #0.1, #2.0" in out
        assert f"next:          resume it on a live server with `conveyor restore orphan " \
               f"--checkpoint {saved}`" in out

        status, _, err = run_cli(capsys, "--server", b.address, "delete", "orphan")
        assert status == 1
        assert (f"pipeline 'orphan' is held by server {a.address}, whose lease ran out (the "
                f"server is gone), not by this one ({b.address}): force the delete here "
                "(`conveyor delete orphan --force`, DeletePipelineRequest.force), or resume "
                "it on a live server") in err

        # After the failover the new holder has written no checkpoint yet: the pipeline's
        # latest is still the one its old holder wrote, as `checkpoints` lists it.
        assert run_cli(capsys, "--server", b.address, "restore", "orphan", "--checkpoint",
                       saved)[0] == 0
        status, out, _ = run_cli(capsys, "--server", b.address, "pipelines")
        assert re.search(rf"orphan\s+{re.escape(b.address)}\s+yes\s+\d+\s+2\s+{IDLE}\s+"
                         rf"{saved}", out), out
        assert "gone" not in out
        status, out, _ = run_cli(capsys, "--server", b.address, "describe", "orphan")
        assert f"latest ckpt:   {saved}" in out and ", alive (its lease" in out
        assert "batches:       produced" in out and "spec:\n" in out
        assert operator.checkpoints("orphan")[-1].id == saved


def test_deleting_a_live_pipeline_held_elsewhere_names_its_server_and_force(
        start_server: Start, image_root: Path, capsys: Capture) -> None:
    a, b = start_server(), start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    with client(a) as ca:
        ca.create("elsewhere", spec).run()
        status, _, err = run_cli(capsys, "--server", b.address, "delete", "elsewhere")
        assert status == 1
        assert (f"conveyor: FAILED_PRECONDITION: pipeline 'elsewhere' is held by server "
                f"{a.address} (alive), not by this one ({b.address}): delete it through that "
                f"server (`conveyor --server {a.address} delete elsewhere`), or force the "
                "delete here (`conveyor delete elsewhere --force`, "
                "DeletePipelineRequest.force), which fences that server") in err
        status, _, err = run_cli(capsys, "--server", b.address, "checkpoint", "elsewhere")
        assert status == 1
        assert (f"pipeline 'elsewhere' is held by server {a.address}, not by this one "
                f"({b.address}): its stream and checkpoints are served there (`conveyor "
                f"--server {a.address} ...`)") in err
        status, _, err = run_cli(capsys, "--server", b.address, "describe", "nowhere")
        assert status == 1
        assert ("pipeline 'nowhere' does not exist: `conveyor pipelines` lists the pipelines "
                "there are; a trainer's open creates it") in err
        assert run_cli(capsys, "--server", b.address, "delete", "elsewhere", "--force")[0] == 0


def test_stream_reports_images_per_second_shapes_and_dtypes(
        start_server: Start, image_root: Path, capsys: Capture) -> None:
    server = start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    with client(server) as c:
        c.create("measured", spec).run()
        status, out, _ = run_cli(capsys, "--server", server.address, "stream", "measured",
                                 "--batches", "3")
        assert status == 0
        found = re.search(r"read 3 batches \(6 samples\) of measured .*: ([0-9.]+) images/s, "
                          r"([0-9.]+) batches/s, [0-9.]+ MB/s", out)
        assert found, out
        images, batches = float(found.group(1)), float(found.group(2))
        assert images == pytest.approx(2 * batches, rel=0.05)
        assert re.search(r"output 0: uint8 HWC, sample shapes? \(", out), out
        assert "output 1: int32, sample shape (1,)" in out
        assert "output 2: float32, sample shape ()" in out


@pytest.mark.parametrize("given", ["0", "-3", "x"])
def test_stream_batches_must_be_a_whole_number_from_one(given: str, capsys: Capture) -> None:
    with pytest.raises(SystemExit) as exited:
        cli(["stream", "p", "--batches", given])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --batches: " in err
    assert ("must be at least 1" in err) if given != "x" else ("expected a whole number" in err)


def test_stream_batches_has_help_and_a_default(capsys: Capture) -> None:
    with pytest.raises(SystemExit):
        cli(["stream", "--help"])
    assert re.search(r"--batches N\s+batches to read \(at least 1; default 100\)",
                     capsys.readouterr().out)


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_no_server_says_how_to_name_one(capsys: Capture,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    address = _closed_port()
    status, _, err = run_cli(capsys, "--server", address, "--timeout", "5", "pipelines")
    assert status == 1
    assert (f"conveyor: no Conveyor server answers at {address} (given with --server): start "
            "one (`conveyor-server --data-root DIR`), or name yours with --server HOST:PORT or "
            "the CONVEYOR_SERVER environment variable") in err
    monkeypatch.setenv("CONVEYOR_SERVER", address)
    status, _, err = run_cli(capsys, "--timeout", "5", "pipelines")
    assert status == 1 and f"at {address} (from CONVEYOR_SERVER)" in err


def test_a_made_up_checkpoint_id_is_no_such_checkpoint(
        start_server: Start, image_root: Path, capsys: Capture) -> None:
    server = start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    with client(server) as c:
        c.create("real", spec).run()
        made_up = "real:1-0123456789abcdef"  # number 1 is the creation checkpoint's
        status, _, err = run_cli(capsys, "--server", server.address, "restore", "copy",
                                 "--checkpoint", made_up)
        assert status == 1
        assert (f"conveyor: NOT_FOUND: no such checkpoint: {made_up!r} is not an id a server "
                "wrote (mistyped?); `conveyor checkpoints real` lists the ones kept") in err
        status, _, err = run_cli(capsys, "--server", server.address, "restore", "copy",
                                 "--checkpoint", "real:99-0123456789abcdef")
        assert status == 1 and "no such checkpoint" in err


def test_spec_lines_shorten_long_lists(image_root: Path) -> None:
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2).spec
    reader = spec.ops[0]
    del reader.args["file_root"]
    reader.args["files"].strings.values.extend(f"f{i}.jpg" for i in range(10))
    lines = spec_lines(spec)
    assert lines[0].startswith("batch size 2, seed ")
    assert "files=['f0.jpg', 'f1.jpg', 'f2.jpg', 'f3.jpg', ... (10 in all)]" in lines[1]
    assert len(lines) == len(spec.ops) + 2
