"""The CUDA kernels on a GPU (skipped where there is none): each within 1 LSB of its numpy
reference on batches of mixed sizes, and GPU pipelines deterministic and resumed exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor import fn, pipeline_def, types
from conveyor_server import Pipeline
from conveyor_server.engine.ops.cuda import reference
from tests.support.cuda_cases import CASES, Case, mixed_batch
from tests.support.images import make_image_folder
from tests.support.resume import assert_resume_exact

pytestmark = pytest.mark.gpu


def _host(value: Any) -> np.ndarray:
    return np.asarray(value.get() if hasattr(value, "get") else value)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.label)
def test_kernel_matches_its_reference(case: Case) -> None:
    from conveyor_server.engine.ops.cuda import launch

    for seed in range(3):
        images = mixed_batch(seed=seed, count=7)
        if case.op_type == "cast" and case.args["dtype"] == "int8":
            images = [im.astype(np.float32) * 1.7 - 150.5 for im in images]
        targs = case.targs(len(images))
        plan = case.plan(images, targs)
        expected = reference.run(plan, images)
        got = [_host(v) for v in launch.run(plan, launch.to_device(images, 0), 0)]
        for g, e in zip(got, expected, strict=True):
            assert g.dtype == e.dtype and g.shape == e.shape, case.label
            diff = np.abs(g.astype(np.float64) - e.astype(np.float64))
            limit = 1e-3 if e.dtype.kind == "f" else 1.0
            assert float(diff.max(initial=0.0)) <= limit, case.label


@pipeline_def(batch_size=4, seed=11, enable_checkpointing=True)
def gpu_training(root: str) -> Any:
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
    images = fn.decoders.image(jpegs, output_type=types.RGB)
    images = fn.random_resized_crop(images, size=(32, 32), device="gpu")
    images = fn.rotate(images, angle=fn.random.uniform(range=(-20.0, 20.0)), device="gpu")
    images = fn.hsv(images, hue=fn.random.uniform(range=(-30.0, 30.0)), device="gpu")
    images = fn.crop_mirror_normalize(images, crop=(24, 24), mean=[120.0], std=[60.0],
                                      dtype="float16", mirror=fn.random.coin_flip(),
                                      device="gpu")
    return images, labels


def _batches(pipe: Pipeline, count: int) -> list[list[bytes]]:
    out = []
    for _ in range(count):
        images, labels = pipe.run()
        out.append([_host(v).tobytes() for v in images] + [_host(v).tobytes() for v in labels])
    return out


def test_gpu_pipeline_is_deterministic_and_resumes_exactly(tmp_path: Path) -> None:
    root = str(make_image_folder(tmp_path / "imgs", counts=(5, 4)))
    with Pipeline(gpu_training(root)) as a, \
            Pipeline(gpu_training(root, num_threads=3, prefetch_queue_depth=3)) as b:
        first = _batches(a, 4)
        assert first == _batches(b, 4), "threads or prefetch changed a GPU batch"
    assert all(len(batch) == 8 for batch in first)  # 4 images, 4 labels
    assert_resume_exact(gpu_training(root), 2, 3)


def test_gpu_outputs_leave_the_device_through_the_ring_as_host_arrays(tmp_path: Path) -> None:
    """A pipeline whose outputs a GPU operator computes hands them out in host memory:
    ``run()`` as arrays the caller keeps, ``run_staged()`` as views of a pinned ring slot
    until released (``engine/gpu_staging.py``)."""
    root = str(make_image_folder(tmp_path / "imgs", counts=(4,)))
    with Pipeline(gpu_training(root, device_id=0)) as pipe:
        images, labels = pipe.run()
        (staged, staged_labels), release = pipe.run_staged()
        staging = pipe._queue.staging
        slots = staging.stager.ring._slots if staging is not None else []
        assert slots, "a GPU pipeline stages its outputs through the ring"
        try:
            for image, view in zip(images, staged, strict=True):
                assert isinstance(image, np.ndarray) and isinstance(view, np.ndarray)
                assert image.dtype == view.dtype == np.float16
                assert image.shape == view.shape == (3, 24, 24)
                assert not any(np.shares_memory(image, s.buffer) for s in slots)
                assert any(np.shares_memory(view, s.buffer) for s in slots)
        finally:
            release()
        assert all(isinstance(v, np.ndarray) for v in (*labels, *staged_labels))
