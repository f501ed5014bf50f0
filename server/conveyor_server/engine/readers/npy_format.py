"""The ``.npy`` format, read without pickle.

A ``.npy`` file is a magic string and version, a header (a Python literal holding the
dtype, the shape and whether the data is in Fortran order) and the raw data. The header is
parsed with NumPy's own header reader, which evaluates a literal and never unpickles;
arrays of Python objects, the only ones ``np.load`` needs pickle for, are refused, as are
structured and non-numeric dtypes. The size the header declares is compared with the bytes
the file holds before anything is allocated, so a header declaring 10^12 elements costs a
header read. Output arrays are C-contiguous and in native byte order (Fortran-order data
is transposed, big-endian data swapped), as DALI's reader returns them.
"""

from __future__ import annotations

import functools
import io
import math
from dataclasses import dataclass

import numpy as np
from numpy.lib import format as npy

#: The dtypes an array may have (by name; either byte order).
DTYPES = ("bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
          "float16", "float32", "float64")
#: Header bytes NumPy's reader accepts (its own default): bounds the literal it evaluates.
MAX_HEADER_BYTES = 10000


class NpyFormatError(ValueError):
    """What is wrong with a ``.npy`` file, as a predicate: the reader puts the file's name
    before it."""


@dataclass(frozen=True)
class NpyHeader:
    dtype: np.dtype
    shape: tuple[int, ...]
    fortran_order: bool
    #: Where the data starts in the file.
    data_offset: int

    @property
    def count(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.count * self.dtype.itemsize

    def describe(self) -> str:
        return f"{'x'.join(map(str, self.shape)) or 'scalar'} {self.dtype.name}"


@functools.lru_cache(maxsize=1024)
def _parse(version: tuple[int, int], raw: bytes) -> tuple[tuple[int, ...], bool, np.dtype]:
    """NumPy's parse of a header (its length field and text): a pure function of the bytes,
    so files that share a header (a data set's usually do) parse it once."""
    reader = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
    shape, fortran, dtype = reader(io.BytesIO(raw), MAX_HEADER_BYTES)
    return tuple(shape), bool(fortran), dtype


def read_header(f: io.BufferedIOBase) -> NpyHeader:
    """Parse the header at the start of ``f``, leaving ``f`` at the data."""
    try:
        version = npy.read_magic(f)
    except ValueError:
        raise NpyFormatError("is not a .npy file (no NumPy magic string)") from None
    if version not in ((1, 0), (2, 0)):
        raise NpyFormatError(f"uses .npy format version {version[0]}.{version[1]}, which "
                             "is not supported (1.0 and 2.0 are)")
    width = 2 if version == (1, 0) else 4
    length_field = f.read(width)
    length = int.from_bytes(length_field, "little")
    if len(length_field) < width or length > MAX_HEADER_BYTES:
        raise NpyFormatError(f"has a malformed .npy header (length {length} bytes; at most "
                             f"{MAX_HEADER_BYTES} are read)")
    text = f.read(length)
    try:
        shape, fortran, dtype = _parse(version, length_field + text)
    except (ValueError, SyntaxError) as exc:
        raise NpyFormatError(f"has a malformed .npy header: {exc}") from None
    if dtype.hasobject:
        raise NpyFormatError("holds Python objects (dtype object): reading them would need "
                             "pickle, which Conveyor never uses")
    if dtype.fields is not None or dtype.subdtype is not None or dtype.name not in DTYPES:
        raise NpyFormatError(f"has dtype {dtype.str!r}: supported are {', '.join(DTYPES)}")
    if any(d < 0 for d in shape):
        raise NpyFormatError(f"declares a negative dimension in shape {shape}")
    return NpyHeader(dtype, shape, fortran, f.tell())


def check_size(header: NpyHeader, file_size: int) -> None:
    """Refuse a header that declares more data than the file holds after it."""
    held = file_size - header.data_offset
    if header.nbytes > held:
        raise NpyFormatError(f"declares {header.describe()} = {header.nbytes:,} bytes of "
                             f"data, but the file holds {held:,} after its header")


def read_data(f: io.BufferedIOBase, header: NpyHeader) -> np.ndarray:
    """The array whose data starts at ``f``'s position: C-contiguous, native byte order.
    The caller checked the size first (``check_size``)."""
    flat = np.empty(header.count, dtype=header.dtype)
    view = flat.view(np.uint8).data
    filled = 0
    while filled < header.nbytes:
        got = f.readinto(view[filled:])
        if not got:
            raise NpyFormatError(f"ends after {filled:,} of {header.nbytes:,} data bytes")
        filled += got
    native = header.dtype.newbyteorder("=")
    if header.fortran_order:
        array = flat.reshape(header.shape[::-1]).T
        return array.astype(native, order="C")  # one copy: transposed and swapped
    array = flat.reshape(header.shape)
    return array if header.dtype.isnative else array.astype(native)
