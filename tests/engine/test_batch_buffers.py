"""The pool of large batch outputs: a buffer is reused only once no array refers to it."""

from __future__ import annotations

import gc

import numpy as np

from conveyor_server.engine.ops.normalize.batch_buffers import BufferPool


def test_a_buffer_comes_back_only_when_its_last_view_is_gone() -> None:
    pool = BufferPool(min_bytes=1 << 10, keep=2)
    batch = pool.take((4, 3, 16, 16), np.dtype(np.float32))
    assert batch.shape == (4, 3, 16, 16) and batch.dtype == np.float32
    assert batch.flags.c_contiguous and batch.flags.writeable
    batch[...] = 7.0
    sample = batch[2]  # what the engine hands on for one sample
    address = sample.__array_interface__["data"][0]
    del batch
    gc.collect()
    assert pool.free_buffers() == 0, "the buffer went back while a sample still viewed it"
    other = pool.take((4, 3, 16, 16), np.dtype(np.float32))  # a fresh buffer, not the sample's
    other[...] = -1.0
    assert (sample == 7.0).all()
    del sample
    gc.collect()
    assert pool.free_buffers() == 1
    again = pool.take((2, 3, 16, 32), np.dtype(np.float32))  # same size in bytes: reused
    assert again.ctypes.data + 2 * 3 * 16 * 16 * 4 == address
    assert pool.free_buffers() == 0


def test_small_arrays_and_other_sizes_are_not_pooled_and_the_pool_is_bounded() -> None:
    pool = BufferPool(min_bytes=1 << 10, keep=2)
    small = pool.take((8, 8), np.dtype(np.float16))
    assert small.flags.owndata  # np.empty's own
    arrays = [pool.take((64, 64), np.dtype(np.float32)) for _ in range(3)]
    del arrays
    gc.collect()
    assert pool.free_buffers() == 2
    wider = pool.take((64, 65), np.dtype(np.float32))  # no free buffer of its size
    assert wider.shape == (64, 65) and pool.free_buffers() == 2
