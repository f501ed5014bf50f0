"""Limits an operator puts on what one pipeline may make the server hold.

Exceeding one raises ``ResourceExhausted`` naming the limit; nothing is lost: the pipeline
stays at its position (a batch that is refused was not returned) and its checkpoints stay
valid, so a pipeline restored on a server with higher limits goes on from there.

``spec`` bounds the spec itself (batch size, threads, prefetch depth, operators, argument
sizes: ``spec_bounds.py``), checked before anything is built from it; the other limits are
checked while batches are made, before the memory is allocated where the size is known
(``check_output``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from conveyor.errors import ResourceExhausted
from conveyor.tensor_list import TensorList
from conveyor_server.engine.spec_bounds import SpecBounds


@dataclass(frozen=True)
class EngineLimits:
    #: Bytes of one batch, all outputs together (None: no limit).
    max_batch_bytes: int | None = None
    #: Pixels (height x width) of one decoded image (None: no limit); an image of 16-bit
    #: samples counts twice, one of 32-bit samples four times (what its decoder holds).
    max_image_pixels: int | None = None
    #: Bytes of one data file (None: no limit).
    max_file_bytes: int | None = None
    #: Height or width of any image an operator makes, and of any size argument.
    max_extent: int | None = None
    #: Bounds on the spec itself (None: only its validity is checked).
    spec: SpecBounds | None = None

    def check_image(self, height: int, width: int, what: str, bytes_per_sample: int = 1,
                    note: str = "") -> None:
        if self.max_image_pixels is None:
            return
        pixels = height * width
        counted = pixels * max(1, bytes_per_sample)
        if counted > self.max_image_pixels:
            weight = "" if counted == pixels else \
                f" of {8 * bytes_per_sample}-bit samples, counted {bytes_per_sample}x ({counted:,})"
            raise ResourceExhausted(
                f"{what} is {width}x{height} = {pixels:,} pixels{weight}, above the "
                f"server's limit limits.max_image_pixels = {self.max_image_pixels:,}{note}")

    def check_file(self, size: int, name: str) -> None:
        """ResourceExhausted naming the file ``name`` if ``size`` is above the limit."""
        if self.max_file_bytes is not None and size > self.max_file_bytes:
            raise ResourceExhausted(
                f"readers.file: {name!r} is {size:,} bytes, above the server's limit "
                f"limits.max_file_bytes = {self.max_file_bytes:,}; it was not read")

    def check_output(self, shape: Sequence[int], dtype: np.dtype | str,
                     what: str = "its output") -> None:
        """Refuse an image of ``shape`` (HWC, or one sample's shape) and ``dtype`` before it
        is allocated: each extent against ``max_extent``, height x width against
        ``max_image_pixels``, its bytes against ``max_batch_bytes``. Cheap where it passes:
        it runs for every sample."""
        height, width = (int(shape[0]), int(shape[1])) if len(shape) >= 2 else (0, 0)
        if self.max_extent is not None and max(height, width) > self.max_extent:
            raise ResourceExhausted(
                f"{what} would be {_dims(shape)}: {max(height, width):,} pixels high or "
                f"wide, above the server's limit limits.max_extent = {self.max_extent:,}",
                limit="limits.max_extent")
        if self.max_image_pixels is not None and height * width > self.max_image_pixels:
            raise ResourceExhausted(
                f"{what} would be {_dims(shape)}: {height * width:,} pixels, above the "
                f"server's limit limits.max_image_pixels = {self.max_image_pixels:,}",
                limit="limits.max_image_pixels")
        if self.max_batch_bytes is not None:
            nbytes = math.prod(shape) * np.dtype(dtype).itemsize
            if nbytes > self.max_batch_bytes:
                self.check_bytes(nbytes, f"{what} would be {_dims(shape)} {np.dtype(dtype)}")

    def check_bytes(self, nbytes: int, what: str) -> None:
        """Refuse an allocation of ``nbytes`` (``what`` says what it would be) above
        ``max_batch_bytes``: no sample or batch may be larger."""
        if self.max_batch_bytes is not None and nbytes > self.max_batch_bytes:
            raise ResourceExhausted(
                f"{what} = {nbytes:,} bytes, above the server's limit "
                f"limits.max_batch_bytes = {self.max_batch_bytes:,}",
                limit="limits.max_batch_bytes")

    def check_batch(self, outputs: Sequence[TensorList], index: int) -> None:
        if self.max_batch_bytes is None:
            return
        total = sum(sample.nbytes for output in outputs for sample in output)
        if total > self.max_batch_bytes:
            raise ResourceExhausted(
                f"batch {index} is {total:,} bytes, above the server's limit "
                f"limits.max_batch_bytes = {self.max_batch_bytes:,}")


def _dims(shape: Sequence[int]) -> str:
    return "x".join(str(int(d)) for d in shape)


NO_LIMITS = EngineLimits()
