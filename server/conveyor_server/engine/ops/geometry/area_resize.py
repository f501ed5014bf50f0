"""The area-averaging resize (``resize_filters.area_filter``): the step ``resize_image`` takes
along shrinking axes, for linear interpolation with antialiasing (resize's default).

Its bytes are OpenCV's ``INTER_AREA``. A uint8 image with 1, 3 or 4 channels goes to the
server's compiled kernel (``area_kernel.c``), which computes the same float32 operations in
the same order at 0.57 of OpenCV's CPU on the ResNet-50 pipeline's windows
(``bench/area_resize.py``): OpenCV's generic loop was 41 % of that pipeline's CPU.
Anything else, and the sizes OpenCV resizes by another method (whole-number scales on both
axes: its integer fast path), goes to OpenCV, as does every image where the kernel was not
built (no C compiler at install), and the rare resize that would take the kernel more than
its scratch limit (64 MB): the bytes are the same either way
(tests/engine/test_area_kernel.py), so the choice is not part of the behaviour identity.
"""

from __future__ import annotations

from collections.abc import Callable

import cv2
import numpy as np

from conveyor_server.engine.ops.args import cv_resize
from conveyor_server.engine.ops.geometry.resize_filters import area_filter, inverse_scale


def _load_kernel() -> Callable[..., bool] | None:
    """The compiled kernel's entry point, or None where the server was installed without a C
    compiler (OpenCV then computes every area resize)."""
    try:
        from conveyor_server.engine.ops.geometry._area_kernel import area_u8
    except ImportError:
        return None
    return area_u8


_AREA_U8 = _load_kernel()

#: Which computes uint8 area resizes here: "compiled kernel" or "OpenCV".
KERNEL = "OpenCV" if _AREA_U8 is None else "compiled kernel"

_KERNEL_CHANNELS = (1, 3, 4)
_DBL_EPSILON = float(np.finfo(np.float64).eps)


def _opencv_fast_path(in_size: int, out_size: int) -> bool:
    """Whether OpenCV takes this axis's scale as a whole number (its integer-sum path is taken
    when both axes' are)."""
    scale = inverse_scale(in_size, out_size)
    return abs(scale - round(scale)) < _DBL_EPSILON


def _kernel_takes(image: np.ndarray, out_hw: tuple[int, int]) -> bool:
    h, w, channels = image.shape
    return (_AREA_U8 is not None and image.dtype == np.uint8
            and channels in _KERNEL_CHANNELS and image.strides[1:] == (channels, 1)
            and image.strides[0] >= w * channels
            and out_hw[0] <= h and out_hw[1] <= w
            and not (_opencv_fast_path(h, out_hw[0]) and _opencv_fast_path(w, out_hw[1])))


def area_resize(image: np.ndarray, out_hw: tuple[int, int]) -> np.ndarray:
    """``image`` (HWC, no axis growing) averaged down to ``out_hw``: a new C-contiguous array."""
    if not _kernel_takes(image, out_hw):
        return cv_resize(image, out_hw, cv2.INTER_AREA)
    assert _AREA_U8 is not None
    h, w, channels = image.shape
    out_h, out_w = out_hw
    cols, rows = area_filter(w, out_w), area_filter(h, out_h)
    row_stride = image.strides[0]
    if image.flags.c_contiguous:
        flat = image.reshape(-1)
    else:  # a window of a larger image: its bytes from its first pixel to its last
        span = (h - 1) * row_stride + w * channels
        flat = np.lib.stride_tricks.as_strided(image, shape=(span,), strides=(1,),
                                               writeable=False)
    out = np.empty((out_h, out_w, channels), dtype=np.uint8)
    if not _AREA_U8(flat, h, w, channels, row_stride, out, out_h, out_w,
                    cols.start, cols.weights, cols.taps, rows.start, rows.weights, rows.taps):
        # The kernel would need more scratch memory than it allows itself (a shrink by a
        # very large factor, or a very wide image): OpenCV needs O(width).
        return cv_resize(image, out_hw, cv2.INTER_AREA)
    return out
