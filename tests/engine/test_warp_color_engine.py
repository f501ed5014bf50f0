"""warp_affine, saturation and equalize in a pipeline, their per-sample values drawn by
random operators: exact resume (the shared save/restore property) and a stream that does
not depend on threads or prefetch."""

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


def warp_color(root: str, **options: Any) -> Any:
    @pipeline_def(batch_size=4, seed=3, enable_checkpointing=True, **options)
    def pipeline() -> Any:
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
        images = fn.resize(fn.decoders.image(jpegs), size=(24, 28))
        # A random matrix per sample, as a second input and by name.
        mtx = fn.random.uniform(range=(-0.3, 1.2), shape=(2, 3))
        warped = fn.warp_affine(images, mtx, interp_type=types.INTERP_NN, fill_value=0)
        smooth = fn.warp_affine(images, matrix=mtx, inverse_map=False, size=(20, 30),
                                dtype=types.FLOAT)
        saturated = fn.saturation(images, saturation=fn.random.uniform(range=(0.0, 2.0)))
        equalized = fn.experimental.equalize(saturated)
        return warped, smooth, saturated, equalized, labels

    return pipeline()


@pytest.mark.parametrize("before", [0, 2, 9])
def test_resume_is_exact_with_warp_affine_saturation_and_equalize(data: Path,
                                                                  before: int) -> None:
    assert_resume_exact(warp_color(str(data)), before, 5)


@pytest.mark.parametrize(("threads", "depth"), [(4, 1), (1, 4), (3, 3)])
def test_warp_affine_saturation_and_equalize_do_not_depend_on_threads_or_prefetch(
    data: Path, threads: int, depth: int
) -> None:
    base = warp_color(str(data), num_threads=1, prefetch_queue_depth=1)
    other = warp_color(str(data), num_threads=threads, prefetch_queue_depth=depth)
    with Pipeline(base) as a, Pipeline(other) as b:
        first = run_batches(a, 6)
        assert_same_stream(first, run_batches(b, 6), f"{threads} threads, {depth} deep")
    # Keyed by the sample: each sample has a matrix and a saturation of its own.
    warped = [np.ascontiguousarray(s).tobytes() for batch in first for s in batch[0]]
    assert len(set(warped)) == len(warped)
    assert first[0][1][0].dtype == np.float32 and first[0][1][0].shape == (20, 30, 3)
