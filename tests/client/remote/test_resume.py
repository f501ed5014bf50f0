"""The exactly-once resume as the easy path: the trainer's consumed count travels in the
Restore request and is checked before the name moves; one call resumes a drained or lost
pipeline at the trainer's own position; a stream blocked on flow control is checkpointed by
the drain and still receives that checkpoint's id."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from conveyor import errors, fn, pipeline_def, types
from conveyor_server.demo.run import rotate_pipeline
from tests.support.resume import batch_bytes, reference, run_batches
from tests.support.servers import DEADLINE, Start, client, wait_for


def test_restore_checks_consumed_before_taking_over_the_name(start_server: Start,
                                                             image_root: Path) -> None:
    a, b = start_server(), start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=3)
    with client(a) as ca, client(b) as cb:
        pipe = ca.create("kept", spec)
        run_batches(pipe, 3)  # type: ignore[arg-type]
        saved = pipe.checkpoint()
        generation = ca.pipeline("kept").generation
        with pytest.raises(errors.InvalidArgument, match=r"consumed=1 is before the "
                           r"checkpoint's position \(3 batches\); nothing was taken over"):
            cb.restore("kept", checkpoint=saved.id, consumed=1)
        info = cb.pipeline("kept")
        assert (info.holder, info.generation) == (a.address, generation)
        assert batch_bytes(pipe.run()) == reference(spec, 4)[3]  # not fenced
        moved = cb.restore("kept", checkpoint=saved.id, consumed=6)
        assert moved.consumed == 6
        assert batch_bytes(moved.run()) == reference(spec, 7)[6]


def test_one_call_resumes_a_lost_pipeline_at_the_trainers_position(
        start_server: Start, image_root: Path) -> None:
    a, b = start_server(), start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=3)
    with client(a, failover=False) as ca, client(b) as cb:  # the trainer moves it itself
        pipe = ca.create("lost", spec)
        run_batches(pipe, 2)  # type: ignore[arg-type]
        pipe.checkpoint()
        run_batches(pipe, 3)  # type: ignore[arg-type]
        a.kill()
        with pytest.raises(errors.ConveyorError):
            pipe.run()
        resumed = pipe.resume(on=cb)
        assert resumed.consumed == 5
        assert [batch_bytes(resumed.run()) for _ in range(2)] == reference(spec, 7)[5:]
        # Before the trainer's first checkpoint, the creation checkpoint serves.
        again = cb.resume("lost", consumed=1)
        assert [batch_bytes(again.run()) for _ in range(2)] == reference(spec, 3)[1:]
        with pytest.raises(errors.NotFound, match="does not exist and has no checkpoints"):
            cb.resume("never-created", consumed=0)


@pipeline_def(batch_size=4, seed=9, enable_checkpointing=True, prefetch_queue_depth=2)
def big(root: str) -> Any:
    jpegs, labels = fn.readers.file(file_root=root)
    images = fn.decoders.image(jpegs, output_type=types.RGB)
    return fn.resize(images, size=(1100, 1000)), labels


def test_a_stream_blocked_on_flow_control_receives_the_drain_checkpoint(
        start_server: Start, image_root: Path) -> None:
    a, b = start_server("--grace", "8"), start_server()
    spec = big(str(image_root / "imgs"))
    with client(a, failover=False) as ca, client(b) as cb:  # the trainer moves it itself
        pipe = ca.create("blocked", spec)
        pipe.run()  # 13 MB batches: the stream stalls on flow control while the trainer is idle
        assert a.proc is not None
        a.proc.send_signal(signal.SIGTERM)
        # Checkpointed by the drain although the stream cannot move (within the drain wait).
        wait_for(lambda: len(cb.checkpoints("blocked")) == 2, "the drain's checkpoint", 6.0)
        creation, early = cb.checkpoints("blocked")
        assert (creation.batches, early.batches) == (0, 1)
        with pytest.raises(errors.Unavailable, match="shutting down") as caught:
            for _ in range(100):
                pipe.run()  # what was sent is delivered, then the end with the id
        drained = caught.value.checkpoint_id  # type: ignore[attr-defined]
        assert drained in {c.id for c in cb.checkpoints("blocked")}
        assert caught.value.checkpoint_batches <= pipe.consumed  # type: ignore[attr-defined]
        resumed = pipe.resume(on=cb)
        assert batch_bytes(resumed.run()) == reference(spec, pipe.consumed + 1)[-1]
        assert a.proc.wait(DEADLINE) == 0
