"""Batch outputs in memory that is already mapped: a pool of large buffers, each given back
when the last array viewing it is gone.

A per-batch output of 224x224x3 float32 images is ~38.5 MB (64 samples), past glibc's
largest mmap threshold (32 MiB, ``conveyor.transport.allocator``): every batch's array is then
its own mapping, whose pages the kernel faults in and zeroes as they are first written and unmaps
when the array is freed. A float16 batch (half the size) is reused from the heap instead,
so without the pool a float32 batch cost ~0.1-0.3 ms more CPU per image than a float16 one
for that alone. ``take`` hands out an array on a buffer of the pool; the array's base is a
lease whose finalizer puts the buffer back once no array (the batch, its samples' views,
a trainer's copy-free ``as_array``) refers to it, so no buffer is written while it is read.

The pool keeps at most ``FREE_BUFFERS`` free buffers (the oldest go first) and only for
arrays of ``MIN_BYTES`` or more: smaller ones glibc's heap reuses by itself. Buffers hold no
values from before: every caller writes every byte of what it takes.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

import numpy as np

#: Arrays smaller than this come from ``np.empty`` (the heap reuses them).
MIN_BYTES = 8 << 20
#: Free buffers kept per process for reuse, of any sizes.
FREE_BUFFERS = 4


class _Lease:
    """The base of an array on a pooled buffer: owns the buffer while the array lives."""

    __slots__ = ("__array_interface__", "_buffer", "_pool")

    def __init__(self, pool: BufferPool, buffer: np.ndarray, shape: tuple[int, ...],
                 dtype: np.dtype) -> None:
        self._pool, self._buffer = pool, buffer
        self.__array_interface__: dict[str, Any] = {
            "version": 3, "shape": shape, "typestr": dtype.str,
            "data": (buffer.ctypes.data, False)}

    def __del__(self) -> None:
        self._pool.give_back(self._buffer)


class BufferPool:
    """Free buffers (uint8, C-contiguous) by size, handed out as arrays of any shape."""

    def __init__(self, min_bytes: int = MIN_BYTES, keep: int = FREE_BUFFERS) -> None:
        self.min_bytes, self.keep = min_bytes, keep
        self._free: deque[np.ndarray] = deque()
        self._lock = threading.Lock()

    def take(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An uninitialized C-contiguous array of ``shape`` and ``dtype``."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes < self.min_bytes or dtype.hasobject:
            return np.empty(shape, dtype=dtype)
        buffer = self._pop(nbytes)
        if buffer is None:
            buffer = np.empty(nbytes, dtype=np.uint8)
        return np.asarray(_Lease(self, buffer, shape, dtype))

    def give_back(self, buffer: np.ndarray) -> None:
        with self._lock:
            self._free.append(buffer)
            while len(self._free) > self.keep:
                self._free.popleft()

    def free_buffers(self) -> int:
        with self._lock:
            return len(self._free)

    def _pop(self, nbytes: int) -> np.ndarray | None:
        with self._lock:
            for i, buffer in enumerate(self._free):
                if buffer.nbytes == nbytes:
                    del self._free[i]
                    return buffer
        return None


#: The process's pool for per-batch operator outputs.
POOL = BufferPool()
