"""``crop_mirror_normalize`` of uint8 pixels by table lookup.

A uint8 pixel takes one of 256 values, so per channel the operator's whole arithmetic
(the float32 multiply, the add, the conversion to the output type with its rounding and
saturation) is a function of the value alone. ``normalize.py`` computes that function once
per channel on a ramp of the 256 values with its own arithmetic (``ramp``); here each
pixel's output is then copied from that table, bit for bit, by OpenCV's ``LUT``, which
moves table entries as they are (a float16 table is looked up as its integer bits). The
bytes are those of the arithmetic path by construction; what changes is the cost: numpy's
float32 to float16 conversion alone takes ~0.65 ms per 224x224x3 image, the lookup ~0.05
ms per channel.

The lookup takes outputs of 1, 2 or 4 bytes per value (float32 included: a float32 table
is looked up as int32 bits), images of 1 to 4 channels, CHW outputs (padded channels
included) and HWC outputs without padded channels. For float32 the lookup beats numpy's
multiply-add in place too (224x224x3 uint8, one thread: 0.10 ms against 0.13 CHW, 0.12
against 0.41 for a mirrored HWC crop, whose reversed rows numpy reads slowly).
"""

from __future__ import annotations

import threading

import cv2
import numpy as np

#: The integer type a table's entries are copied as, by their size in bytes.
_BITS: dict[int, np.dtype] = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16),
                              4: np.dtype(np.int32)}
MAX_CHANNELS = 4


def ramp(channels: int) -> np.ndarray:
    """An HWC uint8 image of 256 x 1 pixels whose pixel ``v`` has value ``v`` in every
    channel: normalized, it is the table."""
    values = np.arange(256, dtype=np.uint8)
    return np.ascontiguousarray(np.repeat(values[:, np.newaxis], channels, axis=1)
                                .reshape(256, 1, channels))


def applies(out: np.ndarray, view: np.ndarray, *, chw: bool) -> bool:
    """Whether ``lookup_into`` writes ``view`` (HWC) into ``out``, faster than the
    arithmetic for every type it takes (224x224x3 CHW, one thread: float16 0.12 ms
    against 0.60, uint8 0.12 against 0.42, float32 0.10 against 0.13)."""
    c = view.shape[2]
    return (view.dtype == np.uint8 and out.dtype.itemsize in _BITS
            and 1 <= c <= MAX_CHANNELS and view.size > 0 and out.flags.c_contiguous
            and (chw or out.shape[2] == c))


def lookup_into(out: np.ndarray, view: np.ndarray, table: np.ndarray, *, chw: bool) -> None:
    """Write each pixel of ``view`` (HWC uint8, any strides) as its channel's entry of
    ``table`` ((256, 1, C) of ``out``'s type, ``ramp`` normalized) into ``out``: CHW, or
    HWC with C channels. Padded CHW channels are left to the caller."""
    c = view.shape[2]
    bits = _BITS[out.dtype.itemsize]
    entries = table.view(bits).reshape(256, c)
    if view.strides[1] < 0:  # mirrored: OpenCV takes no negative strides, so it mirrors
        src = cv2.flip(_positive(view[:, ::-1]), 1)
    else:
        src = _positive(view)
    if src.ndim == 2:  # OpenCV returns one channel without its axis
        src = src[:, :, np.newaxis]
    target = out.view(bits)
    if not chw and c > 1:
        _lut(src, np.ascontiguousarray(entries).reshape(1, 256, c), target)
        return
    planes = cv2.split(src, _scratch_planes(src.shape)) if c > 1 else [src[:, :, 0]]
    per_channel = np.ascontiguousarray(entries.T)  # row k: channel k's 256 entries
    for k in range(c):
        _lut(planes[k], per_channel[k:k + 1], target[k] if chw else target[:, :, 0])


#: Scratch planes larger than this are not kept between calls.
SCRATCH_BYTES = 4 << 20
_scratch = threading.local()


def _scratch_planes(shape: tuple[int, ...]) -> list[np.ndarray]:
    """Planes for ``cv2.split`` of an HWC image of ``shape`` to write into: this thread's,
    kept from one call to the next (a split into new planes costs twice as much, ~0.04
    against ~0.02 ms for 224x224x3, most of it allocating them). The planes are read by
    the lookups of the same call, before the thread splits anything else."""
    h, w, c = shape
    planes: np.ndarray | None = getattr(_scratch, "planes", None)
    if planes is None or planes.shape != (c, h, w):
        planes = np.empty((c, h, w), dtype=np.uint8)
        if planes.nbytes <= SCRATCH_BYTES:
            _scratch.planes = planes
    return list(planes)


def _positive(a: np.ndarray) -> np.ndarray:
    """``a`` itself where OpenCV takes its strides (all positive), else a contiguous copy."""
    return a if min(a.strides) > 0 else np.ascontiguousarray(a)


def _lut(src: np.ndarray, lut: np.ndarray, target: np.ndarray) -> None:
    result = cv2.LUT(src, lut, dst=target)
    if result is not target and not np.shares_memory(result, target):  # written elsewhere
        np.copyto(target, result.reshape(target.shape))
