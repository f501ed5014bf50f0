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
    #: Pixels (height x width) of one decoded image (None: no limit).
    max_image_pixels: int | None = None

    def check_image(self, height: int, width: int, what: str) -> None:
        if self.max_image_pixels is not None and height * width > self.max_image_pixels:
            raise ResourceExhausted(
                f"{what} is {width}x{height} = {height * width:,} pixels, above the "
                f"server's limit limits.max_image_pixels = {self.max_image_pixels:,}")

    def check_batch(self, outputs: Sequence[TensorList], index: int) -> None:
        if self.max_batch_bytes is None:
            return
        total = sum(sample.nbytes for output in outputs for sample in output)
        if total > self.max_batch_bytes:
            raise ResourceExhausted(
                f"batch {index} is {total:,} bytes, above the server's limit "
                f"limits.max_batch_bytes = {self.max_batch_bytes:,}")


NO_LIMITS = EngineLimits()
