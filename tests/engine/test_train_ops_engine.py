"""The training ops in a pipeline: exact resume (the shared save/restore property) and a
stream that does not depend on threads or prefetch, with keyed windows per sample."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor import fn, pipeline_def, types
from conveyor_server import Pipeline
from tests.support.images import make_image_folder
from tests.support.resume import assert_resume_exact, assert_same_stream, run_batches


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_image_folder(tmp_path_factory.mktemp("data") / "imgs", counts=(5, 4, 6))


def train_ops(root: str, **options: Any) -> Any:
    @pipeline_def(batch_size=4, seed=3, enable_checkpointing=True, **options)
    def pipeline() -> Any:
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
        window = fn.decoders.image_random_crop(jpegs, random_area=[0.3, 1.0])
        window = fn.resize(window, size=(24, 24))
        rrc = fn.random_resized_crop(fn.decoders.image(jpegs), size=(20, 16))
        rrc = fn.brightness_contrast(rrc, brightness=fn.random.uniform(range=(0.6, 1.4)),
                                     contrast=fn.random.uniform(range=(0.6, 1.4)))
        rrc = fn.hsv(rrc, hue=fn.random.uniform(range=(-30.0, 30.0)), saturation=1.2)
        rrc = fn.color_twist(rrc, hue=fn.random.uniform(range=(-10.0, 10.0)),
                             brightness=1.1, dtype=types.FLOAT)
        centre = fn.decoders.image_crop(jpegs, crop=(16, 16),
                                        crop_pos_x=fn.random.uniform(range=(0.0, 1.0)))
        sliced = fn.decoders.image_slice(jpegs, fn.random.uniform(range=(0.0, 0.5), shape=(2,)),
                                         fn.random.uniform(range=(0.2, 0.5), shape=(2,)),
                                         output_type=types.BGR)
        return window, rrc, centre, labels, sliced

    return pipeline()


@pytest.mark.parametrize("before", [0, 2, 9])
def test_resume_is_exact_with_the_training_ops(data: Path, before: int) -> None:
    assert_resume_exact(train_ops(str(data)), before, 5)


@pytest.mark.parametrize(("threads", "depth"), [(4, 1), (1, 4), (3, 3)])
def test_training_ops_do_not_depend_on_threads_or_prefetch(
    data: Path, threads: int, depth: int
) -> None:
    base = train_ops(str(data), num_threads=1, prefetch_queue_depth=1)
    other = train_ops(str(data), num_threads=threads, prefetch_queue_depth=depth)
    with Pipeline(base) as a, Pipeline(other) as b:
        first = run_batches(a, 6)
        assert_same_stream(first, run_batches(b, 6), f"{threads} threads, {depth} deep")
    # Keyed by the sample: the random windows differ from sample to sample.
    windows = [np.ascontiguousarray(s).tobytes() for batch in first for s in batch[0]]
    assert len(set(windows)) > len(windows) // 2
