"""Where the images a batch decodes live.

- Decoded into the batch's own buffer (``decode_places``): one allocation, in host memory or
  on the current device and stream, for every image whose decoded size is known before the
  decode; each image is a view of it, starting at a multiple of ``PLACE_ALIGNMENT`` bytes,
  and nvImageCodec writes into it through an ``Image`` over that view. Nothing is allocated
  or wrapped per image.
- Decoded into memory nvImageCodec allocated (``wrap_device_image``): a CuPy array over the
  image's device memory, which keeps the image alive.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Where each image of a batch starts in the batch's buffer: a multiple of this many bytes.
PLACE_ALIGNMENT = 256


@dataclass(frozen=True)
class DecodePlaces:
    """Where the images of a batch are decoded: per image, its view of the batch's buffer
    (HWC uint8; None: nvImageCodec allocates the image) and the nvImageCodec ``Image`` over
    that view (None likewise)."""

    arrays: list[Any]
    images: list[Any]


def decode_places(nv: Any, shapes: Sequence[tuple[int, int, int] | None],
                  cupy: Any | None) -> DecodePlaces:
    """One buffer for the images of ``shapes`` (HWC; None: not placed), in host memory
    (``cupy`` None) or in device memory on the current device and stream; each image's
    view starts at a multiple of ``PLACE_ALIGNMENT`` bytes."""
    sizes = np.array([0 if s is None else s[0] * s[1] * s[2] for s in shapes], dtype=np.int64)
    padded = -(-sizes // PLACE_ALIGNMENT) * PLACE_ALIGNMENT
    starts = (np.cumsum(padded) - padded).tolist()
    total = int(padded.sum())
    if total == 0:
        return DecodePlaces([None] * len(shapes), [None] * len(shapes))
    if cupy is None:
        buffer = np.empty(total, dtype=np.uint8)

        def place(shape: tuple[int, int, int], start: int) -> tuple[Any, Any]:
            view = np.ndarray(shape, np.uint8, buffer, start)
            return view, nv.as_image(view)
    else:
        device = cupy.empty(total, dtype=cupy.uint8)
        base, stream = device.data.ptr, cupy.cuda.get_current_stream().ptr

        def place(shape: tuple[int, int, int], start: int) -> tuple[Any, Any]:
            # The view's interface without a stream of its own: the buffer was allocated
            # on the decode's stream, so nvImageCodec has nothing to wait for.
            return (cupy.ndarray(shape, cupy.uint8, device.data + start),
                    nv.as_image(_DeviceSpan(base + start, shape, device), stream))
    placed = [(None, None) if shape is None else place(shape, start)
              for shape, start in zip(shapes, starts, strict=True)]
    return DecodePlaces([view for view, _ in placed], [image for _, image in placed])


class _DeviceSpan:
    """A span of device memory as ``__cuda_array_interface__`` describes it (HWC uint8,
    C-contiguous, no stream), holding the allocation it lies in."""

    def __init__(self, pointer: int, shape: tuple[int, int, int], owner: Any) -> None:
        self.owner = owner
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "|u1",
                                         "data": (pointer, False), "strides": None,
                                         "version": 3}


def byte_extent(shape: Sequence[int], strides: Sequence[int] | None, itemsize: int) -> int:
    """The bytes an array of ``shape`` and non-negative byte ``strides`` (None:
    C-contiguous) spans from its first element to the end of its last."""
    if any(n == 0 for n in shape):
        return 0
    if strides is None:
        count = 1
        for n in shape:
            count *= n
        return count * itemsize
    return sum((n - 1) * s for n, s in zip(shape, strides, strict=True)) + itemsize


def wrap_device_image(cupy: Any, image: Any) -> Any:
    """A CuPy array over a decoded image's device memory (on the current device), which
    keeps the image alive.

    Built from the image's pointer, shape and strides rather than by ``cupy.asarray``: that
    goes through ``__cuda_array_interface__``, whose ``stream`` entry makes CuPy call
    ``cudaStreamSynchronize`` on it from the host, once per image. The decode was enqueued
    on the stream the consumers run on, so their order needs no wait at all."""
    desc = image.__cuda_array_interface__
    shape = tuple(int(n) for n in desc["shape"])
    dtype = np.dtype(desc["typestr"])
    strides = desc.get("strides")
    strides = None if strides is None else tuple(int(s) for s in strides)
    pointer = int(desc["data"][0])
    memory = cupy.cuda.UnownedMemory(pointer, byte_extent(shape, strides, dtype.itemsize),
                                     image, cupy.cuda.Device().id)
    return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(memory, 0), strides)
