"""Limits an operator puts on what one pipeline may make the server hold.

Exceeding one raises ``ResourceExhausted`` naming the limit; nothing is lost: the pipeline
stays at its position (a batch that is refused was not returned) and its checkpoints stay
valid, so a pipeline restored on a server with higher limits goes on from there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from conveyor.errors import ResourceExhausted
from conveyor.tensor_list import TensorList


@dataclass(frozen=True)
class EngineLimits:
    #: Bytes of one batch, all outputs together (None: no limit).
    max_batch_bytes: int | None = None
    #: Pixels (height x width) of one decoded image (None: no limit); an image of 16-bit
    #: samples counts twice, one of 32-bit samples four times (what its decoder holds).
    max_image_pixels: int | None = None
    #: Bytes of one data file (None: no limit).
    max_file_bytes: int | None = None

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

    def check_batch(self, outputs: Sequence[TensorList], index: int) -> None:
        if self.max_batch_bytes is None:
            return
        total = sum(sample.nbytes for output in outputs for sample in output)
        if total > self.max_batch_bytes:
            raise ResourceExhausted(
                f"batch {index} is {total:,} bytes, above the server's limit "
                f"limits.max_batch_bytes = {self.max_batch_bytes:,}")


NO_LIMITS = EngineLimits()
