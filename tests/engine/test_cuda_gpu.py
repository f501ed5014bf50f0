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
from conveyor_server.engine.staging import OutputStaging
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
        assert isinstance(staging, OutputStaging)
        slots = staging.stager.ring._slots
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


# -- outputs kept on the device -----------------------------------------------------------


@pipeline_def(batch_size=4, seed=11, enable_checkpointing=True)
def decoded_on_gpu(root: str) -> Any:
    """The mixed decoder's images as outputs: each in an allocation of its own."""
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
    return fn.decoders.image(jpegs, device="mixed", output_type=types.RGB), labels


@pytest.mark.parametrize("make", [gpu_training, decoded_on_gpu])
def test_outputs_kept_on_the_device_are_the_bytes_run_gives_in_host_memory(
        tmp_path: Path, make: Any) -> None:
    import cupy

    from conveyor_server.engine.device.device_outputs import DeviceTensorList

    root = str(make_image_folder(tmp_path / "imgs", counts=(5, 4)))
    with Pipeline(make(root, device_id=0)) as host, \
            Pipeline(make(root, device_id=0), device_outputs=True) as kept:
        for _ in range(3):
            (images, labels), (on_gpu, labels_kept) = host.run(), kept.run()
            assert isinstance(on_gpu, DeviceTensorList)
            assert all(isinstance(v, np.ndarray) for v in labels_kept)
            assert [int(v[0]) for v in labels] == [int(v[0]) for v in labels_kept]
            for image, sample, copied in zip(images, on_gpu, on_gpu.as_cpu(), strict=True):
                assert isinstance(sample, cupy.ndarray) and sample.device.id == 0
                np.testing.assert_array_equal(image, sample.get())
                np.testing.assert_array_equal(image, copied)
            if on_gpu.is_dense_tensor():
                whole = on_gpu.as_tensor()
                assert whole.shape == (4, *images[0].shape)
                if make is gpu_training:  # one allocation: a view, not a copy
                    assert whole.data.ptr == on_gpu[0].data.ptr
                np.testing.assert_array_equal(whole.get(), np.stack(list(images)))


_SLOW_SUM = r"""
extern "C" __global__ void slow_sum(const unsigned short* x, int n, long long cycles,
                                    unsigned long long* out) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
    unsigned long long s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
    atomicAdd(out, s);
}
"""


def test_device_memory_goes_back_only_once_the_callers_stream_is_past_it(
        tmp_path: Path) -> None:
    """The caller reads a batch on a stream of its own, slowly, and drops its arrays at
    once: the memory waits for that stream before CuPy's pool may give it to the next
    batch, and the caller's read sees the batch's bytes."""
    import cupy

    root = str(make_image_folder(tmp_path / "imgs", counts=(5, 4)))
    with cupy.cuda.Device(0):
        mine = cupy.cuda.Stream(non_blocking=True)
        slow = cupy.RawKernel(_SLOW_SUM, "slow_sum")
        with Pipeline(gpu_training(root, device_id=0)) as host, \
                Pipeline(gpu_training(root, device_id=0), device_outputs=True,
                         cuda_stream=mine) as kept:
            expected = np.stack(list(host.run()[0])).view(np.uint16)
            images = kept.run()[0].as_tensor()
            with mine:  # about five seconds of waiting (at 2 GHz), then the sum
                total = cupy.zeros(1, dtype=cupy.uint64)
                slow((1,), (256,), (images, np.int32(images.size), np.int64(10_000_000_000),
                                    total))
            loans = kept._handover.loans if kept._handover is not None else None
            assert loans is not None and loans.lent == 1
            del images
            assert loans.lent == 0 and loans.waiting == 1
            later = [kept.run() for _ in range(3)]  # computed while the caller still reads
            assert loans.waiting == 1, "freed while the caller's stream still reads it"
            mine.synchronize()
            later.append(kept.run())
            assert loans.waiting == 0 and loans.lent == 3 + 1
            assert int(total.get()[0]) == int(expected.astype(np.uint64).sum())


@pytest.mark.parametrize("make", [gpu_training, decoded_on_gpu])
def test_batches_on_two_compute_streams_are_the_same_bytes_and_resume_exactly(
        tmp_path: Path, make: Any) -> None:
    """``gpu_streams=2``: batch k on lane k mod 2, through the ring and kept on the device."""
    from conveyor_server.engine.device import streams

    root = str(make_image_folder(tmp_path / "imgs", counts=(5, 4)))
    with Pipeline(make(root, device_id=0)) as one, \
            Pipeline(make(root, device_id=0), gpu_streams=2) as two, \
            Pipeline(make(root, device_id=0), gpu_streams=2, device_outputs=True) as kept:
        for _ in range(4):
            (a, la), (b, lb), (c, lc) = one.run(), two.run(), kept.run()
            assert [int(v[0]) for v in la] == [int(v[0]) for v in lb] == [int(v[0]) for v in lc]
            for x, y, z in zip(a, b, c.as_cpu(), strict=True):
                np.testing.assert_array_equal(x, y)
                np.testing.assert_array_equal(x, z)
        assert streams.compute_stream(0, 1) is not streams.compute_stream(0, 0)
    spec = make(root, device_id=0)
    with Pipeline(spec, gpu_streams=2) as first:
        expected = _batches(first, 4)
        blob = first.checkpoint(batches=2)
    with Pipeline(spec, checkpoint=blob, gpu_streams=2) as resumed:
        assert _batches(resumed, 2) == expected[2:]
