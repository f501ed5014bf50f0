"""Batches on the wire: raw tensor bytes in frames of at most ``FRAME_BYTES``.

A batch is one header frame (dtype, layout and per-sample shapes of every output) followed
by data frames; the header frame carries the first bytes too. Data is every output in
order, every sample in order, each sample C-contiguous. The receiver copies each frame once
into a single writable buffer and hands out views of it: nothing is pickled, and there are
no per-pixel fields.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from conveyor.errors import DataLoss
from conveyor.tensor_list import TensorList
from conveyor.v1 import service_pb2

FRAME_BYTES = 1 << 20


def _header(index: int, outputs: Sequence[TensorList]) -> tuple[service_pb2.BatchHeader,
                                                                 list[memoryview]]:
    header = service_pb2.BatchHeader(index=index, batch_size=len(outputs[0]) if outputs else 0)
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
            dtype=out.dtype.str if out.dtype.byteorder not in "=|" else out.dtype.name,
            layout=out.layout(), ndim=ndim, shapes=shapes))
    header.total_bytes = total
    return header, pieces


def encode_batch(index: int, outputs: Sequence[TensorList],
                 frame_bytes: int = FRAME_BYTES) -> Iterator[service_pb2.StreamBatchesResponse]:
    header, pieces = _header(index, outputs)
    first = True
    chunk: list[memoryview] = []
    room = frame_bytes
    for piece in pieces:
        while len(piece):
            take = piece[:room]
            chunk.append(take)
            piece = piece[len(take):]
            room -= len(take)
            if room == 0:
                yield service_pb2.StreamBatchesResponse(
                    header=header if first else None, data=b"".join(chunk))
                first, chunk, room = False, [], frame_bytes
    if chunk or first:
        yield service_pb2.StreamBatchesResponse(
            header=header if first else None, data=b"".join(chunk))


class BatchAssembler:
    """Feed frames in order; ``feed`` returns the batch when its last byte has arrived."""

    def __init__(self) -> None:
        self._header: service_pb2.BatchHeader | None = None
        self._buffer = np.empty(0, dtype=np.uint8)
        self._filled = 0

    @property
    def index(self) -> int | None:
        return self._header.index if self._header is not None else None

    def feed(self, frame: service_pb2.StreamBatchesResponse) -> tuple[TensorList, ...] | None:
        if frame.HasField("header"):
            if self._header is not None:
                raise DataLoss(f"batch {self._header.index} ended after {self._filled} of "
                               f"{self._header.total_bytes} bytes")
            self._header = frame.header
            self._buffer = np.empty(frame.header.total_bytes, dtype=np.uint8)
            self._filled = 0
        elif self._header is None:
            raise DataLoss("data frame without a batch header")
        data = frame.data
        end = self._filled + len(data)
        if end > len(self._buffer):
            raise DataLoss(f"batch {self._header.index} has more bytes than its header says")
        if data:
            self._buffer[self._filled:end] = np.frombuffer(data, dtype=np.uint8)
        self._filled = end
        if self._filled < len(self._buffer):
            return None
        header, self._header = self._header, None
        return self._outputs(header, self._buffer)

    @staticmethod
    def _outputs(header: service_pb2.BatchHeader, buffer: np.ndarray) -> tuple[TensorList, ...]:
        outputs = []
        offset = 0
        for th in header.outputs:
            dtype = np.dtype(th.dtype)
            samples = []
            shapes = list(th.shapes)
            for i in range(header.batch_size):
                shape = tuple(shapes[i * th.ndim:(i + 1) * th.ndim])
                nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                view = buffer[offset:offset + nbytes].view(dtype).reshape(shape)
                samples.append(view)
                offset += nbytes
            outputs.append(TensorList(samples, th.layout, dtype))
        return tuple(outputs)
