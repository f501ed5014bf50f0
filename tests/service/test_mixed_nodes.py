"""A mixed node pool, with real servers: a server started on other CPU paths (OpenCV's
AVX/AVX2 dispatch and IPP off, numpy's SIMD targets off, as on an older or an Arm node)
either refuses a checkpoint, naming the operator, or streams identical bytes. Never
different bytes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conveyor import errors, fn, pipeline_def, types
from conveyor_server.demo.run import rotate_pipeline
from conveyor_server.engine.identity.behaviour.measure import key_of, process_behaviour
from conveyor_server.engine.identity.behaviour.reference import measure_in, reference_environment
from tests.support.resume import batch_bytes, run_batches
from tests.support.servers import Start, client


@pipeline_def(batch_size=4, num_threads=2, seed=8, enable_checkpointing=True)
def cropping(root: str) -> Any:
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
    images = fn.decoders.image(jpegs, output_type=types.RGB)
    flipped = fn.flip(images, horizontal=fn.random.coin_flip())
    out = fn.crop_mirror_normalize(flipped, crop=(32, 32), mean=[128.0], std=[64.0],
                                   crop_pos_x=fn.random.uniform(range=(0.0, 1.0)))
    return out, labels


def test_other_cpu_paths_refuse_or_stream_identical_bytes(start_server: Start,
                                                          image_root: Path) -> None:
    env = reference_environment()
    here = {k: v.hex() for k, v in process_behaviour().digests.items()}
    there = measure_in(env)["digests"]
    a, b = start_server(), start_server(env=env)
    specs = {"rotating": rotate_pipeline(str(image_root / "imgs")).spec,
             "cropping": cropping(str(image_root / "imgs")).spec}
    identical = []
    with client(a) as ca, client(b) as cb:
        for name, spec in specs.items():
            pipe = ca.create(name, spec)
            run_batches(pipe, 2)  # type: ignore[arg-type]
            saved = pipe.checkpoint()
            expected = [batch_bytes(pipe.run()) for _ in range(2)]
            keys = sorted({key_of(op) for op in spec.ops})
            differ = [k for k in keys if here[k] != there[k]]
            if differ:
                op = differ[0].split("[")[0].split("@")[0]
                with pytest.raises(errors.EngineMismatch,
                                   match=f"operator '{op}' .*computes other bytes"):
                    cb.restore(name, checkpoint=saved.id)
            else:
                moved = cb.restore(name, checkpoint=saved.id)
                assert [batch_bytes(moved.run()) for _ in range(2)] == expected
                identical.append(name)
    # Decoding, cropping, flipping and normalizing take the same path everywhere.
    assert "cropping" in identical
