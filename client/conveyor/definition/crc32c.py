"""CRC-32C (Castagnoli, the checksum of TFRecord framing) with numpy, and TFRecord's mask.

A byte-at-a-time table loop in Python runs at a few MB/s. Here the data is cut into
64-byte chunks whose CRC registers advance together, one numpy step per byte position
(vectorised over the chunks); the registers are then joined pairwise, a tree of numpy
steps, by CRC's linearity: the register after ``A`` then ``B`` is the register after ``A``
moved over ``len(B)`` zero bytes (a fixed linear map, applied with four table lookups)
xor-ed with the register of ``B`` alone. Cost: 64 + log2(len / 64) numpy steps, and the
last few bytes one at a time.
"""

from __future__ import annotations

import functools

import numpy as np

_POLY = 0x82F63B78
MASK_DELTA = 0xA282EAD8


def _byte_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(_POLY), table >> 1).astype(np.uint32)
    return table


TABLE = _byte_table()
_TABLE_LIST = [int(v) for v in TABLE]


def _raw_update(crc: int, data: bytes | memoryview) -> int:
    """The register after ``data`` (no pre- or post-inversion), one byte at a time."""
    table = _TABLE_LIST
    for byte in bytes(data):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc


@functools.lru_cache(maxsize=128)
def _zeros_operator(length: int) -> np.ndarray:
    """The register's map over ``length`` zero bytes, as four 256-entry tables (one per
    byte of the register), shape (4, 256): the map is linear over GF(2), so the images of
    the 32 basis bits (its columns, found by squaring the one-byte map) give every
    value's."""
    step = [_raw_update(1 << bit, b"\0") for bit in range(32)]  # one zero byte
    columns = [1 << bit for bit in range(32)]  # the identity
    while length:
        if length & 1:
            columns = [_apply(step, column) for column in columns]
        length >>= 1
        if length:
            step = [_apply(step, column) for column in step]
    tables = np.zeros((4, 256), dtype=np.uint32)
    for lane in range(4):
        for value in range(1, 256):
            low = value & -value
            tables[lane, value] = tables[lane, value ^ low] ^ columns[lane * 8 +
                                                                     low.bit_length() - 1]
    return tables


def _apply(columns: list[int], register: int) -> int:
    """The linear map given by its ``columns`` applied to ``register``."""
    out = 0
    bit = 0
    while register:
        if register & 1:
            out ^= columns[bit]
        register >>= 1
        bit += 1
    return out


def _shift(tables: np.ndarray, registers: np.ndarray) -> np.ndarray:
    """``registers`` each moved over the zero bytes ``tables`` stands for."""
    return (tables[0][registers & 0xFF] ^ tables[1][(registers >> 8) & 0xFF]
            ^ tables[2][(registers >> 16) & 0xFF] ^ tables[3][registers >> 24])


#: Below this many bytes the plain loop is the faster; above it, chunks of ``_CHUNK`` bytes.
_SMALL = 1024
_CHUNK = 64


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """The CRC-32C of ``data`` (``crc32c(b"123456789") == 0xE3069283``)."""
    view = memoryview(data).cast("B")
    n = len(view)
    if n < _SMALL:
        return _raw_update(0xFFFFFFFF, view) ^ 0xFFFFFFFF
    count = n // _CHUNK
    body = np.frombuffer(view, dtype=np.uint8, count=count * _CHUNK).reshape(count, _CHUNK)
    # Each chunk's register from zero, the first from the initial value; the chunks are
    # put behind leading empty ones (register 0, which add nothing) to a power of two.
    width = 1 << (count - 1).bit_length()
    registers = np.zeros(width, dtype=np.uint32)
    registers[width - count] = 0xFFFFFFFF
    columns = np.zeros((width, _CHUNK), dtype=np.uint8)
    columns[width - count:] = body
    columns = np.ascontiguousarray(columns.T)
    for j in range(_CHUNK):
        registers = TABLE[(registers ^ columns[j]) & 0xFF] ^ (registers >> np.uint32(8))
    # Join neighbours pairwise: (a, b) -> a moved over b's bytes, xor b.
    span = _CHUNK
    while len(registers) > 1:
        registers = _shift(_zeros_operator(span), registers[0::2]) ^ registers[1::2]
        span *= 2
    crc = _raw_update(int(registers[0]), view[count * _CHUNK:])
    return crc ^ 0xFFFFFFFF

def masked_crc32c(data: bytes | bytearray | memoryview) -> int:
    """TFRecord's masked CRC-32C: rotated right by 15 bits plus a constant."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF
