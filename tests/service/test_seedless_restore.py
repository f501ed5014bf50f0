"""A restore on a server takes the checkpoint's seed where the given spec drew its own (no
seed was given, as in most DALI scripts), and refuses an explicit seed that differs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conveyor import errors
from conveyor.dali import fn, pipeline_def, types
from tests.support.resume import batch_bytes
from tests.support.servers import Start, client


@pipeline_def(batch_size=2, enable_checkpointing=True)
def seedless(image_dir: str) -> Any:
    jpegs, labels = fn.readers.file(file_root=image_dir, random_shuffle=True, name="Reader")
    images = fn.decoders.image(jpegs, output_type=types.RGB)
    return fn.rotate(images, angle=fn.random.uniform(range=(-30.0, 30.0))), labels


def test_a_restore_given_a_seedless_pipeline_takes_the_checkpoints_seed(
        start_server: Start, image_root: Path) -> None:
    root = str(image_root / "imgs")
    made = seedless(root)
    with client(start_server()) as c:
        pipe = c.create("seedless", made)  # the pipeline object is taken as its spec
        pipe.run()
        ckpt = pipe.checkpoint()
        expected = pipe.run()
        again = seedless(root)
        assert again.seed != made.seed
        restored = c.restore("seedless-copy", checkpoint=ckpt, spec=again)
        assert batch_bytes(restored.run()) == batch_bytes(expected)
        with pytest.raises(errors.SpecMismatch,
                           match=f"seed: checkpoint has {made.seed}, given spec has 7"):
            c.restore("seedless-other", checkpoint=ckpt, spec=seedless(root, seed=7))
