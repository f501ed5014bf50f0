"""Limits an operator puts on what one pipeline may make the server hold.

Exceeding one raises ``ResourceExhausted`` naming the limit; nothing is lost: the pipeline
stays at its position (a batch that is refused was not returned) and its checkpoints stay
valid, so a pipeline restored on a server with higher limits goes on from there.

``spec`` bounds the spec itself (batch size, threads, prefetch depth, operators, argument
sizes: ``SpecBounds``), which ``spec_bounds.check_spec`` checks before anything is built from
it; the other limits are checked while batches are made, before the memory is allocated
where the size is known (``check_output``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from conveyor.errors import ResourceExhausted
from conveyor.tensor_list import TensorList

#: Room a checkpoint takes beyond its spec: the engine's identity, one state and one file
#: list digest per operator (a few KiB for the largest spec); generous on purpose.
CHECKPOINT_OVERHEAD_BYTES = 1 << 20
#: Bounds an operator sets in the configuration (``limits.<name>``); the others are fixed.
CONFIGURABLE = ("max_batch_size", "max_threads", "max_prefetch_depth", "max_ops",
                "max_spec_bytes")


@dataclass(frozen=True)
class SpecBounds:
    #: Samples per batch.
    max_batch_size: int = 4096
    #: Worker threads of one pipeline.
    max_threads: int = 64
    #: Batches one pipeline computes ahead of its consumer.
    max_prefetch_depth: int = 16
    #: Operators in one spec (and outputs it returns).
    max_ops: int = 256
    #: The encoded spec (a checkpoint may be this plus ``CHECKPOINT_OVERHEAD_BYTES``).
    max_spec_bytes: int = 16 << 20
    #: Entries of a list argument (``mean``, ``shape``, ``file_filters``, ...), except the
    #: file list itself (``files``, ``labels``), which only ``max_spec_bytes`` bounds.
    max_list_items: int = 4096
    #: Characters of a string argument or list entry (a path: Linux's PATH_MAX).
    max_string_chars: int = 4096
    #: Characters of an operator's type, name, device and argument names, and of the
    #: spec's ``definition``.
    max_name_chars: int = 256
    #: Values a random operator draws per sample (the product of its ``shape``).
    max_random_values: int = 4096

    @property
    def max_checkpoint_bytes(self) -> int:
        """The largest checkpoint blob a server with these bounds accepts."""
        return self.max_spec_bytes + CHECKPOINT_OVERHEAD_BYTES

    @property
    def max_message_bytes(self) -> int:
        """The largest request a server with these bounds must read: a Restore carrying a
        checkpoint and a spec to compare it with (and as much again as a checkpoint's
        overhead for the rest of the message)."""
        return self.max_checkpoint_bytes + self.max_spec_bytes + CHECKPOINT_OVERHEAD_BYTES

    def limit_name(self, attr: str) -> str:
        """How a message names bound ``attr``: its configuration key, or the fixed value."""
        if attr in CONFIGURABLE:
            return f"the server's limit limits.{attr} = {getattr(self, attr):,}"
        return f"the fixed limit {attr} = {getattr(self, attr):,}"

    def over(self, field: str, what: str, attr: str) -> ResourceExhausted:
        """The error for ``field``, which is ``what``, over bound ``attr``."""
        key = f"limits.{attr}" if attr in CONFIGURABLE else attr
        return ResourceExhausted(f"{field}: {what}, above {self.limit_name(attr)}",
                                 field=field, limit=key)

    def check_checkpoint(self, blob: bytes, field: str = "data") -> None:
        """Refuse a checkpoint blob larger than any spec within these bounds can make."""
        if len(blob) > self.max_checkpoint_bytes:
            raise ResourceExhausted(
                f"{field}: the checkpoint is {len(blob):,} bytes, above the server's limit "
                f"of {self.max_checkpoint_bytes:,} (limits.max_spec_bytes = "
                f"{self.max_spec_bytes:,} plus {CHECKPOINT_OVERHEAD_BYTES:,})",
                field=field, limit="limits.max_spec_bytes")



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
            raise self.file_too_big(size, name)

    def file_too_big(self, size: int, name: str) -> ResourceExhausted:
        """The refusal of the file ``name`` of ``size`` bytes, above the limit."""
        return ResourceExhausted(
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
