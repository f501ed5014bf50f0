"""The service end to end: real redis-server, real conveyor-server subprocesses, loopback."""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest

import conveyor
from conveyor import errors
from conveyor_server import Pipeline
from conveyor_server.demo.run import rotate_pipeline
from tests.support.resume import assert_same_stream, batch_bytes, run_batches
from tests.support.servers import DEADLINE, Start, client, wait_for


def test_seed_notebook_across_two_servers(start_server: Start, image_root: Path) -> None:
    a, b = start_server(), start_server()
    spec = rotate_pipeline(str(image_root / "imgs"))
    with client(a) as ca, client(b) as cb:
        pipe = ca.create("rotate", spec)
        for _ in range(3):
            pipe.run()
        ckpt = pipe.checkpoint()
        assert ckpt.batches == 3 and ckpt.id.startswith("rotate:")
        ref_images, ref_labels, ref_angles = pipe.run()
        restored = cb.restore("rotate", checkpoint=ckpt.id)
        images, labels, angles = restored.run()
        assert [int(x[0]) for x in labels] == [int(x[0]) for x in ref_labels]
        assert [float(x) for x in angles] == [float(x) for x in ref_angles]
        assert all(np.array_equal(x, y) for x, y in zip(images, ref_images, strict=True))
        assert images.layout() == "HWC" and images[0].flags.writeable
        # The remote stream is the in-process stream.
        with Pipeline(spec) as local:
            assert batch_bytes(run_batches(local, 4)[3]) == batch_bytes((images, labels, angles))
        info = cb.pipeline("rotate")
        assert info.holder == b.address and info.sent >= 4
        listed = {p.name: p.holder for p in cb.pipelines()}
        assert listed == {"rotate": b.address}


def test_restore_accepts_checkpoint_object_blob_and_verifying_spec(
    start_server: Start, image_root: Path
) -> None:
    a = start_server()
    spec = rotate_pipeline(str(image_root / "imgs"))
    with client(a) as c:
        pipe = c.create("src", spec)
        run_batches(pipe, 2)  # type: ignore[arg-type]
        ckpt = pipe.checkpoint()
        expected = pipe.run()
        sources: list[str | conveyor.Checkpoint | bytes] = [ckpt, ckpt.data, ckpt.id]
        for i, source in enumerate(sources):
            copy = c.restore(f"copy{i}", checkpoint=source, spec=spec)
            assert batch_bytes(copy.run()) == batch_bytes(expected)
        other = rotate_pipeline(str(image_root / "imgs"), seed=99)
        with pytest.raises(errors.FailedPrecondition, match="seed: checkpoint has 12"):
            c.restore("copy9", checkpoint=ckpt, spec=other)


CRASH_SEED = 20261122


def crash_points(count: int = 8) -> list[tuple[int, int]]:
    """(checkpoint every k batches, batches consumed before the crash), from a seeded list,
    each pair once: a repeated pair would run the same crash again (the seed's eight draws
    hold six distinct pairs)."""
    rng = np.random.default_rng(CRASH_SEED)
    drawn = [(int(rng.integers(1, 4)), int(rng.integers(1, 12))) for _ in range(count)]
    return list(dict.fromkeys(drawn))


def test_kill_9_mid_stream_then_restore_on_another_server_is_exact(
    start_server: Start, image_root: Path
) -> None:
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=5, prefetch_queue_depth=3)
    total = 16
    with Pipeline(spec) as local:
        uninterrupted = run_batches(local, total)
    points = crash_points()
    # B, and the server A killed at each point, started together (each A serves one point).
    b, *killed = start_server.many(1 + len(points))
    for n, ((every, crash_at), a) in enumerate(zip(points, killed, strict=True)):
        label = f"checkpoint every {every}, crash after {crash_at} (seed {CRASH_SEED})"
        name = f"crash{n}-{every}-{crash_at}"
        with client(a) as ca, client(b) as cb:
            pipe = ca.create(name, spec)
            received, last = [], None
            for i in range(crash_at):
                received.append(pipe.run())
                if (i + 1) % every == 0:
                    last = pipe.checkpoint()
            a.kill()
            resume_from = last.id if last else None
            kept = received[: last.batches] if last else []
            if resume_from is None:  # no checkpoint yet: start over from a fresh pipeline
                restored = cb.create(name + "-fresh", spec)
            else:
                found = cb.checkpoints(name)
                assert found[-1].id == resume_from, label
                restored = cb.restore(name, checkpoint=resume_from)
            rest = run_batches(restored, total - len(kept))  # type: ignore[arg-type]
            assert_same_stream(uninterrupted, kept + rest, label)
            restored.close()


def test_restore_fences_the_previous_holder(start_server: Start, image_root: Path) -> None:
    """The zombie's side, seen by a trainer that does not follow (failover off)."""
    a, b = start_server(), start_server()
    spec = rotate_pipeline(str(image_root / "imgs"))
    with client(a, failover=False) as ca, client(b) as cb:
        pipe = ca.create("fenced", spec)
        pipe.run()
        ckpt = pipe.checkpoint()
        cb.restore("fenced", checkpoint=ckpt.id)
        deadline = time.monotonic() + DEADLINE
        with pytest.raises(errors.FailedPrecondition, match=b.address):
            while time.monotonic() < deadline:  # A's stream ends once its watcher sees B
                pipe.run()
        with pytest.raises(errors.FailedPrecondition, match=b.address):
            pipe.checkpoint()
        with pytest.raises(errors.FailedPrecondition, match=b.address):
            ca.checkpoint("fenced")
        with pytest.raises(errors.AlreadyExists, match=b.address):
            ca.create("fenced", spec)
        assert cb.pipeline("fenced").holder == b.address
        # Its creation checkpoint and the trainer's, both A's: none from the fenced A after.
        assert [(c.server, c.batches) for c in cb.checkpoints("fenced")] == \
            [(a.address, 0), (a.address, 1)]


def test_checkpoint_is_the_consumed_position_not_the_produced_one(
    start_server: Start, image_root: Path
) -> None:
    a = start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2, prefetch_queue_depth=6)
    with client(a) as c, Pipeline(spec) as local:
        expected = run_batches(local, 12)
        pipe = c.create("deep", spec)
        run_batches(pipe, 3)  # type: ignore[arg-type]
        wait_for(lambda: c.pipeline("deep").sent > 4, "the server to send ahead")
        info = c.pipeline("deep")
        assert info.produced >= info.sent > 3
        ckpt = pipe.checkpoint()
        assert ckpt.batches == 3
        wait_for(lambda: c.pipeline("deep").acknowledged == 3, "the acknowledgements")
        operator = c.checkpoint("deep")  # no consumed count: the acknowledged position
        assert operator.batches == 3
        copy = c.restore("deep-copy", checkpoint=ckpt)
        assert batch_bytes(copy.run()) == batch_bytes(expected[3])
        with pytest.raises(errors.FailedPrecondition, match="only .* were produced"):
            c.checkpoint("deep", consumed=10_000)


def test_cli_operates_without_moving_the_trainer(
    start_server: Start, image_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from conveyor.cli import main as cli

    server = start_server()
    with client(server) as c:
        pipe = c.create("cli", rotate_pipeline(str(image_root / "imgs")))
        run_batches(pipe, 2)  # type: ignore[arg-type]
        wait_for(lambda: c.pipeline("cli").acknowledged == 2, "acknowledgements")
        assert cli(["--server", server.address, "pipelines"]) == 0
        assert cli(["--server", server.address, "checkpoint", "cli"]) == 0
        assert cli(["--server", server.address, "stream", "cli", "--batches", "3"]) == 0
        assert cli(["--server", server.address, "checkpoints", "cli"]) == 0
        assert cli(["--server", server.address, "describe", "cli"]) == 0
        assert cli(["--server", server.address, "describe", "nope"]) == 1
        out, err = capsys.readouterr()
        assert re.search(r"cli:2-[0-9a-f]{16}  after batch 2", out)
        assert re.search(r"read 3 batches \(\d+ samples\) of cli .* images/s", out)
        assert "acknowledged 2" in out and "NOT_FOUND" in err
        assert [p.name for p in c.pipelines()] == ["cli"], "the stream copy was not deleted"
        with Pipeline(rotate_pipeline(str(image_root / "imgs"))) as local:
            assert batch_bytes(pipe.run()) == batch_bytes(run_batches(local, 3)[2])
        saved = c.checkpoints("cli")[-1].id
        assert cli(["--server", server.address, "restore", "cli-copy", "--checkpoint", saved,
                    "--consumed", "4"]) == 0
        assert f"restored cli-copy on {server.address} at batch 4" in capsys.readouterr().out


def test_a_broken_stream_resumes_at_the_consumers_position(
    start_server: Start, image_root: Path
) -> None:
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2, prefetch_queue_depth=4)
    with client(start_server()) as c, Pipeline(spec) as local:
        expected = run_batches(local, 8)
        pipe = c.create("reconnect", spec)
        got = run_batches(pipe, 3)  # type: ignore[arg-type]
        wait_for(lambda: c.pipeline("reconnect").sent > 3, "the server to send ahead")
        pipe.close()  # the stream breaks with batches sent but never consumed
        wait_for(lambda: not c.pipeline("reconnect").streaming, "the stream to end")
        got += run_batches(pipe, 3)  # type: ignore[arg-type]
        wait_for(lambda: c.pipeline("reconnect").acknowledged == 6, "the acknowledgements")
        pipe.close()
        other = c.attach("reconnect")  # another consumer starts where the acks are
        assert other.consumed == 6
        wait_for(lambda: not c.pipeline("reconnect").streaming, "the stream to end")
        got += run_batches(other, 2)  # type: ignore[arg-type]
        assert_same_stream(expected, got, "reconnecting streams")


def test_closing_a_stream_sends_its_last_acknowledgement(start_server: Start,
                                                          image_root: Path) -> None:
    spec = rotate_pipeline(str(image_root / "imgs"))
    with client(start_server()) as c:
        pipe = c.create("flush", spec)
        run_batches(pipe, 1)  # type: ignore[arg-type]
        wait_for(lambda: c.pipeline("flush").sent >= 4, "the server to send ahead")
        # Batches already received are consumed within one acknowledgement interval, and
        # the stream is closed at once: only close() can tell the server about them.
        run_batches(pipe, 3)  # type: ignore[arg-type]
        pipe.close()
        wait_for(lambda: c.pipeline("flush").acknowledged == 4, "the last acknowledgement", 5)
        assert c.attach("flush").consumed == 4  # a new consumer starts after them
