"""The service end to end: real redis-server, real conveyor-server subprocesses, loopback."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import conveyor
from conveyor import errors, fn, pipeline_def, types
from conveyor_server import Pipeline
from tests.resume import assert_same_stream, batch_bytes, run_batches
from tests.servers import ServerProcess

Start = Callable[..., ServerProcess]
DEADLINE = 20.0


@pipeline_def(batch_size=8, num_threads=2, seed=12, enable_checkpointing=True)
def rotate_pipeline(image_dir: str) -> Any:
    jpegs, labels = fn.readers.file(file_root=image_dir, random_shuffle=True, name="image_reader")
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    angles = fn.random.uniform(range=(-30.0, 30.0))
    rotated = fn.rotate(images, angle=angles, fill_value=0)
    return rotated, labels, angles


def client(server: ServerProcess, **kw: Any) -> conveyor.Client:
    return conveyor.Client(server.address, timeout=DEADLINE, stream_timeout=120, **kw)


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


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
        for i, source in enumerate([ckpt, ckpt.data, ckpt.id]):
            copy = c.restore(f"copy{i}", checkpoint=source, spec=spec)
            assert batch_bytes(copy.run()) == batch_bytes(expected)
        other = rotate_pipeline(str(image_root / "imgs"), seed=99)
        with pytest.raises(errors.FailedPrecondition, match="seed: checkpoint has 12"):
            c.restore("copy9", checkpoint=ckpt, spec=other)
