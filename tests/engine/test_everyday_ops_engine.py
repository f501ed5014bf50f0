"""DALI's everyday operators in a pipeline (brightness, contrast, hue, transpose, reshape,
cat, stack, normalize and random.choice), their per-sample
values drawn by random operators: exact resume (the shared save/restore property) and a
stream that does not depend on threads or prefetch."""

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


def everyday(root: str, **options: Any) -> Any:
    @pipeline_def(batch_size=4, seed=5, enable_checkpointing=True, **options)
    def pipeline() -> Any:
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
        images = fn.resize(fn.decoders.image(jpegs), size=(20, 26))
        bright = fn.brightness(images, brightness=fn.random.uniform(range=(0.5, 1.5)),
                               brightness_shift=0.05)
        contrasted = fn.contrast(bright, contrast=fn.random.uniform(range=(0.2, 1.8)),
                                 dtype=types.FLOAT)
        hued = fn.hue(images, hue=fn.random.uniform(range=(-180.0, 180.0)))
        chw = fn.transpose(hued, perm=[2, 0, 1])
        joined = fn.cat(chw, fn.transpose(bright, perm=[2, 0, 1]), axis_name="C")
        flat = fn.reshape(joined, shape=[6, -1])
        stacked = fn.stack(images, hued, bright, axis=3, axis_name="F")
        turned = fn.hue(images, hue=fn.random.choice([-90.0, 0.5, 90.0], p=[0.25, 0.25, 0.5]))
        normalized = fn.normalize(turned, axis_names="HW", scale=64.0, shift=128.0,
                                  dtype=types.UINT8)
        return bright, contrasted, hued, flat, stacked, normalized, labels

    return pipeline()


@pytest.mark.parametrize("before", [0, 2, 9])
def test_resume_is_exact_with_the_everyday_operators(data: Path, before: int) -> None:
    assert_resume_exact(everyday(str(data)), before, 5)


@pytest.mark.parametrize(("threads", "depth"), [(4, 1), (3, 3)])
def test_everyday_operators_do_not_depend_on_threads_or_prefetch(
    data: Path, threads: int, depth: int
) -> None:
    base = everyday(str(data), num_threads=1, prefetch_queue_depth=1)
    other = everyday(str(data), num_threads=threads, prefetch_queue_depth=depth)
    with Pipeline(base) as a, Pipeline(other) as b:
        first = run_batches(a, 6)
        assert_same_stream(first, run_batches(b, 6), f"{threads} threads, {depth} deep")
    hued = [np.ascontiguousarray(s).tobytes() for batch in first for s in batch[2]]
    assert len(set(hued)) == len(hued)  # a hue of its own per sample
    assert first[0][1][0].dtype == np.float32 and first[0][0][0].dtype == np.uint8
    assert first[0][3][0].shape == (6, 20 * 26) and first[0][4][0].shape == (20, 26, 3, 3)
