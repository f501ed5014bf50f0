"""Reading an image file's header: bounds-checked little reads of its bytes (without
copying the file), the size a header declares, and the errors a header that is cut short
or makes no sense raises (``DataFileError``: a per-sample data error). Shared by
``image_header.py`` and ``image_pages.py``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from conveyor.errors import DataFileError

Order = Literal["little", "big"]


@dataclass(frozen=True)
class ImageSize:
    format: str
    width: int
    height: int
    #: Channels the file holds (0 where the header does not say).
    channels: int = 0
    #: Bits per sample (the largest, where samples differ).
    bits: int = 8
    #: Which part of the file declared this size, for messages ("" for the image itself).
    part: str = ""

    @property
    def pixels(self) -> int:
        return self.width * self.height

    @property
    def bytes_per_sample(self) -> int:
        return max(1, (self.bits + 7) // 8)


class HeaderBytes:
    """Bounds-checked little reads of a file's bytes, without copying the file."""

    def __init__(self, data: np.ndarray | bytes) -> None:
        self.array = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes) \
            else data.reshape(-1).view(np.uint8)
        self.size = int(self.array.size)
        self.fmt = ""

    def cut(self, what: str) -> DataFileError:
        return DataFileError(f"the {self.fmt} header is cut short: the file ends at byte "
                             f"{self.size}, before its {what}")

    def need(self, end: int, what: str) -> None:
        if end > self.size:
            raise self.cut(what)

    def bytes(self, start: int, end: int) -> bytes:
        return self.array[start:end].tobytes()

    def u8(self, pos: int, what: str) -> int:
        self.need(pos + 1, what)
        return int(self.array[pos])

    def uint(self, pos: int, size: int, order: Order, what: str) -> int:
        self.need(pos + size, what)
        return int.from_bytes(self.array[pos:pos + size].tobytes(), order)

    def find(self, values: tuple[int, ...], start: int) -> int:
        """The offset of the next byte among ``values`` at or after ``start``, or -1."""
        chunk = 1 << 12
        while start < self.size:
            hits = np.flatnonzero(np.isin(self.array[start:start + chunk], values))
            if hits.size:
                return start + int(hits[0])
            start += chunk
            chunk = min(chunk * 4, 1 << 20)
        return -1


def _bad(fmt: str, why: str) -> DataFileError:
    return DataFileError(f"the {fmt} header is invalid: {why}")


def invalid(fmt: str, why: str) -> DataFileError:
    return DataFileError(f"the {fmt} header is invalid: {why}")
