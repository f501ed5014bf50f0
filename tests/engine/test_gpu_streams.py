"""Which stream GPU work runs on and what orders the copies out (``engine/device/streams.py``,
``engine/gpu_staging.py``). The wrapping of a decoded image's memory is checked here on
the CPU; the stream checks need a CUDA device (skipped where there is none)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from numpy.lib.array_utils import byte_bounds

from conveyor_server.engine.ops.decode.image_memory import byte_extent


def _span(view: np.ndarray[Any, Any]) -> int:
    """The bytes from ``view``'s first element to the end of its last (numpy's bounds)."""
    low, high = byte_bounds(view)
    return int(high - low)


@pytest.mark.parametrize(("shape", "pitch", "dtype"), [
    ((5, 7, 3), 32, np.uint8),    # rows padded to 32 bytes, as a decoder may pitch them
    ((4, 9, 1), 12, np.uint8),
    ((3, 5, 3), 64, np.float32),
    ((6, 4, 3), 12, np.uint8),    # no padding
])
def test_a_decoded_images_byte_extent_is_what_its_strides_span(
        shape: tuple[int, int, int], pitch: int, dtype: type) -> None:
    itemsize = np.dtype(dtype).itemsize
    base = np.zeros(4096, dtype=np.uint8)
    view: np.ndarray[Any, Any] = np.lib.stride_tricks.as_strided(
        base.view(dtype), shape=shape, strides=(pitch, shape[2] * itemsize, itemsize))
    assert byte_extent(view.shape, view.strides, itemsize) == _span(view)
    dense: np.ndarray[Any, Any] = np.zeros(shape, dtype=dtype)
    assert byte_extent(shape, None, itemsize) == dense.nbytes == _span(dense)
    assert byte_extent((0, 5, 3), (pitch, 3, 1), 1) == 0


# ---- on a GPU ------------------------------------------------------------------------

_LATE_FILL = r"""
extern "C" __global__ void late_fill(unsigned char* out, int n, long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = 7;
}
"""


@pytest.mark.gpu
def test_gpu_work_runs_on_the_devices_non_blocking_compute_stream() -> None:
    import cupy

    from conveyor_server.engine.device import streams
    from conveyor_server.engine.ops.cuda import launch

    stream = streams.compute_stream(0)
    assert stream is streams.compute_stream(0) and stream.is_non_blocking
    with streams.computing(0) as current:
        assert current is stream and cupy.cuda.get_current_stream().ptr == stream.ptr
    assert cupy.cuda.get_current_stream().ptr != stream.ptr  # restored
    # Looked up once per device, the same kernel object on every launch.
    assert launch.kernel("cast_uint8_float32", 0) is launch.kernel("cast_uint8_float32", 0)


@pytest.mark.gpu
def test_a_batchs_copies_wait_for_the_work_that_computed_it() -> None:
    """A kernel on the compute stream that writes late: the copy stream (non-blocking, so
    not ordered by the legacy stream) reads its bytes only after it, through the event the
    fence records."""
    import cupy

    from conveyor_server.engine.device import streams
    from conveyor_server.engine.gpu_staging import CudaCopier

    size = 1 << 16
    copier = CudaCopier(0)
    target = copier.allocate(size)
    with streams.computing(0):
        values = cupy.zeros(size, dtype=np.uint8)
        late_fill = cupy.RawKernel(_LATE_FILL, "late_fill")
        late_fill((1,), (256,), (values, np.int32(size), np.int64(200_000_000)))
        copier.copy(values, target)
        fence = copier.fence()
    fence.wait()
    assert int(target.min()) == int(target.max()) == 7
