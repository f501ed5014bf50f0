"""Which accelerators this process can use."""

from __future__ import annotations

import functools


@functools.cache
def cuda_device_count() -> int:
    """CUDA devices visible through CuPy; 0 without CuPy, a driver or a device."""
    try:
        import cupy
    except ImportError:
        return 0
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # no driver, or a CUDA error: no usable device
        return 0
