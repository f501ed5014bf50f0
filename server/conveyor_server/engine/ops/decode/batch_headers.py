"""The headers of a whole batch of encoded files, read at once: what ``decode.check_file``
checks of each (its format, a JPEG not cut short, the size its header declares against
``limits.max_image_pixels``) and a JPEG's EXIF orientation (``jpeg_fast.exif_orientation``),
as arrays with one entry per file, and each refused file's error.

The server's compiled walk (``image_headers.c``) reads the batch in one call with the GIL
released, by the same walks over the bytes as those Python functions: it settles the
JPEGs and PNGs that pass every check. Every other file (another format, an empty one, a JPEG
cut short, a size above the limit, a header the limit needs and that cannot be read, an
array that is not C-contiguous 1-D uint8) is read by the Python functions, which raise the
error ``check_file`` raises; so is every file where the extension was not built (no C
compiler at install). The answers are the same either way
(tests/engine/test_image_headers.py), and no file is refused otherwise than by
``check_file``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from conveyor.errors import ConveyorError, DataFileError, InvalidArgument
from conveyor_server.engine.admission.limits import EngineLimits
from conveyor_server.engine.ops.decode import image_header, jpeg_fast
from conveyor_server.engine.ops.decode.decode import (
    OP,
    check_bytes,
    check_jpeg_complete,
    check_size,
    sniff_format,
)
from conveyor_server.engine.ops.registry import SampleFailed

#: ``sniff_format``'s names, by the format codes of ``BatchHeaders.formats``.
FORMATS = ("unknown", "JPEG", "PNG", "BMP", "TIFF", "GIF", "WebP")
JPEG = FORMATS.index("JPEG")

#: The columns of ``BatchHeaders.table``, in image_headers.c's order.
FIELDS = ("format", "settled", "contiguous", "complete", "orientation", "height", "width",
          "channels", "bits")
_COLUMN = {name: k for k, name in enumerate(FIELDS)}


def _load_walk() -> tuple[Callable[..., None], Callable[..., None]] | None:
    """The compiled walk's entry points, or None where the server was installed without a C
    compiler (the Python functions then read every file)."""
    try:
        from conveyor_server.engine.ops.decode._image_headers import (
            N_FIELDS,
            walk_files,
            walk_spans,
        )
    except ImportError:
        return None
    assert len(FIELDS) == N_FIELDS
    return walk_files, walk_spans


_WALK = _load_walk()

#: Which reads the batch's headers here: "compiled walk" or "Python".
WALK = "Python" if _WALK is None else "compiled walk"

#: The largest int64: limits.max_image_pixels up to it is compared in the compiled walk
#: (above it, or below 0, every file is read in Python); a larger size a header declares
#: (TIFF, PNM) is saturated to it in the table.
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class BatchHeaders:
    """One row of ``FIELDS`` per file (int64), and the error each refused file raises."""

    table: np.ndarray
    #: File index -> the ``ConveyorError`` ``check_file`` raises for it.
    errors: dict[int, ConveyorError]

    def column(self, name: str) -> np.ndarray:
        return self.table[:, _COLUMN[name]]

    @property
    def formats(self) -> np.ndarray:
        """Format codes: indices into ``FORMATS``."""
        return self.column("format")

    @property
    def settled(self) -> np.ndarray:
        """True where the compiled walk read the file (and it passes); False where the
        Python functions did."""
        return self.column("settled").astype(bool)

    @property
    def contiguous(self) -> np.ndarray:
        """True for a C-contiguous 1-D uint8 array, which a decoder may read in place."""
        return self.column("contiguous").astype(bool)

    @property
    def complete(self) -> np.ndarray:
        """False for a JPEG cut short (``check_jpeg_complete`` refuses it)."""
        return self.column("complete").astype(bool)

    @property
    def orientation(self) -> np.ndarray:
        """A JPEG's EXIF orientation (``exif_orientation``: 1 without one, 0 where it cannot
        be read); 1 for other files."""
        return self.column("orientation")

    @property
    def height(self) -> np.ndarray:
        """The height the header declares (``image_header.read_size``; 0 where it declares
        none or cannot be read; at most 2^63 - 1); ``width``, ``channels`` and ``bits``
        likewise."""
        return self.column("height")

    @property
    def width(self) -> np.ndarray:
        return self.column("width")

    @property
    def channels(self) -> np.ndarray:
        return self.column("channels")

    @property
    def bits(self) -> np.ndarray:
        return self.column("bits")

    def format(self, index: int) -> str:
        return FORMATS[int(self.table[index, _COLUMN["format"]])]

    def upright_jpegs(self) -> np.ndarray:
        """True for each JPEG whose EXIF orientation is 1 (none, or upright)."""
        return (self.formats == JPEG) & (self.orientation == 1)

    def check(self, index: int) -> None:
        """``SampleFailed(index, error)`` where file ``index`` is refused."""
        error = self.errors.get(index)
        if error is not None:
            raise SampleFailed(index, error)

    def check_all(self) -> None:
        """``SampleFailed`` for the first refused file in the batch's order, if any."""
        if self.errors:
            self.check(min(self.errors))


def batch_headers(files: Sequence[np.ndarray], limits: EngineLimits, op: str = OP, *,
                  compiled: bool = True) -> BatchHeaders:
    """The headers of ``files`` (each a file's bytes, as ``check_file`` takes them).
    ``compiled=False`` reads every file in Python, as where the extension was not built."""
    table = np.zeros((len(files), len(FIELDS)), dtype=np.int64)
    max_pixels = _walk_max_pixels(limits)
    if _WALK is None or not compiled or max_pixels is None:
        return _read_in_python(files, range(len(files)), table, limits, op)
    _WALK[0](files, np.ndarray, table, max_pixels)
    unsettled = np.flatnonzero(table[:, _COLUMN["settled"]] == 0).tolist()
    return _read_in_python(files, unsettled, table, limits, op)


def batch_headers_of_spans(buffer: np.ndarray, offsets: np.ndarray, lengths: np.ndarray,
                           limits: EngineLimits, op: str = OP, *,
                           compiled: bool = True) -> BatchHeaders:
    """The headers of the files ``buffer[offsets[i]:offsets[i] + lengths[i]]`` (a batch's
    files in one C-contiguous 1-D uint8 buffer): those of ``batch_headers`` on those views,
    without a view made per file."""
    offsets = np.ascontiguousarray(offsets, dtype=np.int64).reshape(-1)
    lengths = np.ascontiguousarray(lengths, dtype=np.int64).reshape(-1)
    if not isinstance(buffer, np.ndarray) or buffer.dtype != np.uint8 or buffer.ndim != 1 \
            or not buffer.flags.c_contiguous:
        raise InvalidArgument(f"{op}: the batch's files must be one C-contiguous 1-D uint8 "
                              f"buffer, got {type(buffer).__name__} "
                              f"{getattr(buffer, 'dtype', '')} {getattr(buffer, 'shape', '')}")
    if offsets.size != lengths.size or (offsets.size and (
            offsets.min() < 0 or lengths.min() < 0 or offsets.max() > buffer.size
            or (lengths > buffer.size - offsets).any())):  # no sum: it could overflow
        raise InvalidArgument(f"{op}: the files' offsets and lengths ({offsets.size} and "
                              f"{lengths.size}) must be as many, and each span inside the "
                              f"buffer's {buffer.size} bytes")
    table = np.zeros((offsets.size, len(FIELDS)), dtype=np.int64)
    files = _Spans(buffer, offsets, lengths)
    max_pixels = _walk_max_pixels(limits)
    if _WALK is None or not compiled or max_pixels is None:
        return _read_in_python(files, range(len(files)), table, limits, op)
    _WALK[1](buffer, offsets, lengths, table, max_pixels)
    unsettled = np.flatnonzero(table[:, _COLUMN["settled"]] == 0).tolist()
    return _read_in_python(files, unsettled, table, limits, op)


class _Spans(Sequence[np.ndarray]):
    """The files of one buffer, each a view made when asked for."""

    def __init__(self, buffer: np.ndarray, offsets: np.ndarray, lengths: np.ndarray) -> None:
        self._buffer, self._offsets, self._lengths = buffer, offsets, lengths

    def __len__(self) -> int:
        return int(self._offsets.size)

    def __getitem__(self, index: Any) -> Any:
        start = int(self._offsets[index])
        return self._buffer[start:start + int(self._lengths[index])]


def _walk_max_pixels(limits: EngineLimits) -> int | None:
    """limits.max_image_pixels as the compiled walk takes it (-1: no limit), or None where
    it cannot compare it."""
    pixels = limits.max_image_pixels
    if pixels is None:
        return -1
    return pixels if 0 <= pixels <= _INT64_MAX else None


def _read_in_python(files: Sequence[Any], indices: Sequence[int], table: np.ndarray,
                    limits: EngineLimits, op: str) -> BatchHeaders:
    errors: dict[int, ConveyorError] = {}
    for i in indices:
        row, error = file_row(files[i], limits, op)
        table[i] = row
        if error is not None:
            errors[i] = error
    return BatchHeaders(table, errors)


def file_row(data: np.ndarray, limits: EngineLimits,
             op: str = OP) -> tuple[tuple[int, ...], ConveyorError | None]:
    """One file's row of ``FIELDS`` (settled 0) and the error ``check_file(data, limits,
    op)`` raises for it (None where it passes), read by the Python functions in
    ``check_file``'s steps."""
    error: ConveyorError | None = None
    try:
        check_bytes(data, op)
    except InvalidArgument as exc:  # not a file's bytes: nothing more is read
        return (0, 0, 0, 1, 1, 0, 0, 0, 0), exc
    except DataFileError as exc:  # empty
        error = exc
    fmt = sniff_format(data)
    complete, orientation = 1, 1
    if fmt == "JPEG":
        try:
            check_jpeg_complete(data)
        except DataFileError as exc:
            complete = 0
            if error is None:
                error = exc
        orientation = jpeg_fast.exif_orientation(data)
    try:
        size = image_header.read_size(data)
    except DataFileError as exc:
        size = None
        if error is None and limits.max_image_pixels is not None:  # check_file reads it
            error = exc  # only then
    if error is None and limits.max_image_pixels is not None:
        try:
            check_size(size, limits)
        except ConveyorError as exc:
            error = exc
    contiguous = int(isinstance(data, np.ndarray) and data.flags.c_contiguous)
    dims = (0, 0, 0, 0) if size is None else \
        tuple(min(n, _INT64_MAX) for n in (size.height, size.width, size.channels, size.bits))
    return (FORMATS.index(fmt), 0, contiguous, complete, orientation, *dims), error
