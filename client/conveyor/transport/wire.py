"""Batches on the wire: raw tensor bytes in frames of at most ``FRAME_BYTES``.

A batch is one header frame (dtype, layout and per-sample shapes of every output) followed
by data frames; the header frame carries the first bytes too. Data is every output in
order, every sample in order, each sample C-contiguous. Nothing is pickled and there are
no per-pixel fields.

Frames are ``StreamBatchesResponse`` messages, but both ends handle their encoded form
directly: the sender writes each frame with one copy from the sample arrays, and the
receiver copies each frame's data once into a single writable buffer per batch and hands
out views of it. On a call with a data channel (``data_channel.py``) a batch is its header
frame alone (``header_frame``), and its bytes are read from the channel straight into that
buffer.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from conveyor.errors import DataLoss
from conveyor.tensor_list import TensorList
from conveyor.v1 import service_pb2

if TYPE_CHECKING:
    from conveyor.transport.data_channel import DataSocket

FRAME_BYTES = 1 << 20

# Field keys of StreamBatchesResponse: header = 1, data = 2, offer = 3, all
# length-delimited (ComputeBatchesResponse has the same fields).
_HEADER_KEY = b"\x0a"
_DATA_KEY = b"\x12"
_OFFER_KEY = 0x1A


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


@functools.lru_cache(maxsize=64)
def _dtype_name(dtype: np.dtype) -> str:
    """The name a receiver rebuilds ``dtype`` from: 'uint8', or '>f4' if not native."""
    return dtype.str if dtype.byteorder not in "=|" else dtype.name


def batch_header(index: int, outputs: Sequence[TensorList], *, opens_source_epoch: bool = False
                 ) -> tuple[service_pb2.BatchHeader, list[memoryview]]:
    """The header of a batch and the byte pieces of its samples, in wire order;
    ``opens_source_epoch``: the batch opens an external source's epoch (the engine's
    ``epoch_started`` for it)."""
    header = service_pb2.BatchHeader(index=index, batch_size=len(outputs[0]) if outputs else 0,
                                     opens_source_epoch=opens_source_epoch)
    pieces: list[memoryview] = []
    total = 0
    for out in outputs:
        shapes: list[int] = []
        ndim = out[0].ndim if len(out) else 0
        for sample in out:
            if sample.ndim != ndim:
                raise ValueError("samples of one output must have the same number of dimensions")
            shapes.extend(sample.shape)
            contiguous = np.ascontiguousarray(sample)
            if contiguous.nbytes:
                pieces.append(memoryview(contiguous.reshape(-1).view(np.uint8).data))
                total += contiguous.nbytes
        header.outputs.append(service_pb2.TensorHeader(
            dtype=_dtype_name(out.dtype),
            layout=out.layout(), ndim=ndim, shapes=shapes))
    header.total_bytes = total
    return header, pieces


def encode_frames(index: int, outputs: Sequence[TensorList],
                  frame_bytes: int = FRAME_BYTES, *,
                  opens_source_epoch: bool = False) -> Iterator[bytes]:
    """The batch's frames, each an encoded ``StreamBatchesResponse``."""
    header, pieces = batch_header(index, outputs, opens_source_epoch=opens_source_epoch)
    prefix = [_HEADER_KEY, _varint(header.ByteSize()), header.SerializeToString()]
    remaining = header.total_bytes
    chunk: list[memoryview] = []
    room = min(frame_bytes, remaining)
    for piece in pieces:
        while len(piece):
            take = piece[:room]
            chunk.append(take)
            piece = piece[len(take):]
            room -= len(take)
            if room == 0:
                size = sum(len(c) for c in chunk)
                yield b"".join([*prefix, _DATA_KEY, _varint(size), *chunk])
                remaining -= size
                prefix, chunk, room = [], [], min(frame_bytes, remaining)
    if prefix:  # a batch without data bytes still sends its header
        yield b"".join(prefix)


def header_frame(header: service_pb2.BatchHeader) -> bytes:
    """A frame holding ``header`` alone (a batch whose bytes go on a data channel)."""
    body = header.SerializeToString()
    return b"".join([_HEADER_KEY, _varint(len(body)), body])


def parse_offer(frame: bytes) -> service_pb2.DataChannelOffer | None:
    """The data channel offer ``frame`` carries, or None when it is a batch frame."""
    if not frame or frame[0] != _OFFER_KEY:
        return None
    return service_pb2.StreamBatchesResponse.FromString(frame).offer


def parse_frame(frame: bytes) -> tuple[service_pb2.BatchHeader | None, memoryview]:
    """Split an encoded ``StreamBatchesResponse`` into its header (if any) and data."""
    view = memoryview(frame)
    header = None
    data = view[0:0]
    pos = 0
    while pos < len(view):
        key, pos = _read_varint(view, pos)
        if key & 7 != 2:
            raise DataLoss(f"unexpected field {key >> 3} (wire type {key & 7}) in a batch frame")
        size, pos = _read_varint(view, pos)
        if key >> 3 == 1:
            header = service_pb2.BatchHeader.FromString(bytes(view[pos:pos + size]))
        elif key >> 3 == 2:
            data = view[pos:pos + size]
        pos += size
    return header, data


class BatchAssembler:
    """Feed encoded frames in order; ``feed`` returns the batch when its last byte arrived.

    ``expected``: the index the next batch's header must carry, one more after each batch
    returned (None: any index). A header with another index raises ``DataLoss`` naming
    both, before any of its data is taken; ``source`` names the stream in that message.
    ``data``: the call's data channel, when one is attached: every frame is then a header
    alone, and the batch's bytes are read from the channel into its buffer.
    """

    def __init__(self, expected: int | None = None, source: str = "the stream",
                 data: DataSocket | None = None) -> None:
        self.expected = expected
        self._source = source
        self._data = data
        self._header: service_pb2.BatchHeader | None = None
        #: The index of the batch being assembled, or of the last one returned.
        self.index = -1
        #: Whether the batch last returned opens an external source's epoch (its header's
        #: ``opens_source_epoch``).
        self.opens_source_epoch = False
        self._buffer = np.empty(0, dtype=np.uint8)
        self._filled = 0

    def feed(self, frame: bytes) -> tuple[TensorList, ...] | None:
        header, data = parse_frame(frame)
        if header is not None:
            if self._header is not None:
                raise DataLoss(f"batch {self._header.index} ended after {self._filled} of "
                               f"{self._header.total_bytes} bytes")
            if self.expected is not None and header.index != self.expected:
                raise DataLoss(f"batch index {header.index} received, expected "
                               f"{self.expected}: {self._source} is not at this consumer's "
                               "position (batches were skipped or repeated); the batch is "
                               "not returned")
            self._header = header
            self.index = header.index
            self._buffer = np.empty(header.total_bytes, dtype=np.uint8)
            self._filled = 0
            if self._data is not None:
                if len(data):
                    raise DataLoss(f"batch {header.index} came with data in its frame on "
                                   "a call whose data goes on the data channel")
                self._data.read_into(self._buffer)
                self._filled = len(self._buffer)
                return self._done()
        elif self._header is None:
            raise DataLoss("data frame without a batch header")
        end = self._filled + len(data)
        if end > len(self._buffer):
            raise DataLoss(f"batch {self._header.index} has more bytes than its header says")
        if len(data):
            self._buffer[self._filled:end] = np.frombuffer(data, dtype=np.uint8)
        self._filled = end
        if self._filled < len(self._buffer):
            return None
        return self._done()

    def _done(self) -> tuple[TensorList, ...]:
        assert self._header is not None
        done, self._header = self._header, None
        self.opens_source_epoch = done.opens_source_epoch
        if self.expected is not None:
            self.expected += 1
        return self._outputs(done, self._buffer)

    @staticmethod
    def _outputs(header: service_pb2.BatchHeader, buffer: np.ndarray) -> tuple[TensorList, ...]:
        outputs = []
        offset = 0
        count = header.batch_size
        for th in header.outputs:
            dtype = np.dtype(th.dtype)
            shapes = np.asarray(th.shapes, dtype=np.int64).reshape(count, th.ndim)
            samples: list[np.ndarray] = []
            if count and (shapes == shapes[0]).all():
                # One shape for all (the usual case): one view of the block, split by rows.
                shape = tuple(int(d) for d in shapes[0])
                nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                block = buffer[offset:offset + count * nbytes].view(dtype).reshape(
                    (count, *shape))
                samples = list(block) if shape else [block[i, ...] for i in range(count)]
                offset += count * nbytes
            else:
                for row in shapes:
                    shape = tuple(int(d) for d in row)
                    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                    samples.append(buffer[offset:offset + nbytes].view(dtype).reshape(shape))
                    offset += nbytes
            outputs.append(TensorList(samples, th.layout, dtype))
        return tuple(outputs)
