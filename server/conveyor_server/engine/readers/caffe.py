"""``fn.readers.caffe`` and ``fn.readers.caffe2``: samples from Caffe and Caffe2 LMDBs.

The records and their order come from ``lmdb_records.py``; each record is parsed here with
the published message (``formats/``) into DALI's outputs:

- ``readers.caffe``: one ``Datum`` per record. The image (``image_available``): the
  encoded bytes as a 1-D uint8 array (``encoded``, or no ``encoded`` field, as DALI), else
  the raw pixels, stored channel by channel, as an HxWxC uint8 image; the label
  (``label_available``): int32, shape (1,).
- ``readers.caffe2``: one ``TensorProtos`` per record, its tensors in this order: the image
  (``image_available``: a STRING tensor's first entry, encoded, or a BYTE tensor of dims
  (H, W[, C]), raw), the label unless ``label_type`` is NO_LABEL (INT32 or FLOAT; SINGLE:
  one value; MULTI_LABEL_SPARSE: the active indices, output as a ``num_labels`` vector of
  ones at them; MULTI_LABEL_DENSE: the values; MULTI_LABEL_WEIGHTED_SPARSE: the indices,
  then a FLOAT tensor of their weights, output as a float32 ``num_labels`` vector), then
  ``additional_inputs`` tensors (FLOAT, INT32 or INT64, output flat), then the bounding box
  (``bbox``: INT32, 4 values).

A record that does not parse or lacks what the arguments say it holds is DATA_LOSS naming
its database and key (``on_error`` applies). Before anything is allocated from a record's
declared sizes (a raw image's dims, ``num_labels``) it is checked against the engine
limits; the record itself is bounded by ``limits.max_file_bytes`` before it is parsed, and
a parsed message holds at most a small multiple of that.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from conveyor.definition.schemas.readers import (
    MULTI_LABEL_DENSE,
    MULTI_LABEL_SPARSE,
    MULTI_LABEL_WEIGHTED_SPARSE,
    NO_LABEL,
    SINGLE_LABEL,
)
from conveyor.errors import DataFileError
from conveyor_server.engine.admission.limits import NO_LIMITS, EngineLimits
from conveyor_server.engine.ops.probes.probe_set import source_probe
from conveyor_server.engine.readers.build import (
    Reader,
    ReaderRequest,
    reader_orders,
    reader_stage,
    register_reader,
)
from conveyor_server.engine.readers.data_paths import ReaderPaths
from conveyor_server.engine.readers.formats import caffe2_pb2, caffe_pb2
from conveyor_server.engine.readers.identity import ReaderIdentity
from conveyor_server.engine.readers.lmdb_records import LmdbRecords

CAFFE = "readers.caffe"
CAFFE2 = "readers.caffe2"

Tensor = caffe2_pb2.TensorProto


class RecordError(ValueError):
    """What is wrong with a record (the source names it)."""


def _raw_image(data: bytes, height: int, width: int, channels: int, limits: EngineLimits,
               channels_first: bool) -> np.ndarray:
    if min(height, width, channels) < 1:
        raise RecordError(f"declares a raw image of {height}x{width}x{channels}")
    limits.check_output((height, width, channels), "uint8", "its raw image")
    if len(data) != height * width * channels:
        raise RecordError(f"declares a raw {height}x{width}x{channels} image but holds "
                          f"{len(data):,} bytes")
    flat = np.frombuffer(data, dtype=np.uint8)
    if channels_first:
        return np.ascontiguousarray(flat.reshape(channels, height, width).transpose(1, 2, 0))
    return flat.reshape(height, width, channels).copy()


class LmdbSource:
    """Reads one record by its index and parses it into the reader's outputs."""

    def __init__(self, op: str, records: LmdbRecords,
                 parse: Callable[[memoryview], list[np.ndarray]]) -> None:
        self._op = op
        self._records = records
        self._parse = parse

    def where(self, index: int) -> str:
        return self._records.where(index)

    def fetch_ahead(self, indices: Sequence[int]) -> None:
        """Nothing to fetch: an LMDB database is a local file, memory-mapped."""

    def read(self, index: int) -> list[np.ndarray]:
        try:
            return self._records.read(index, self._parse)
        except RecordError as exc:
            raise DataFileError(f"{self._op}: record {self.where(index)} {exc}") from None


class DatumParser:
    """A ``Datum`` record's outputs (``readers.caffe``)."""

    def __init__(self, args: Mapping[str, Any], limits: EngineLimits) -> None:
        self._image = bool(args["image_available"])
        self._label = bool(args["label_available"])
        self._limits = limits

    def __call__(self, value: memoryview) -> list[np.ndarray]:
        datum = caffe_pb2.Datum()
        try:
            datum.ParseFromString(value)  # type: ignore[arg-type]  # upb takes a buffer
        except DecodeError:
            raise RecordError(f"is not a Caffe Datum ({len(value):,} bytes)") from None
        out = []
        if self._image:
            if not datum.HasField("data"):
                raise RecordError("holds no image (Datum.data) and image_available is set")
            if datum.HasField("encoded") and not datum.encoded:
                out.append(_raw_image(datum.data, datum.height, datum.width, datum.channels,
                                      self._limits, channels_first=True))
            else:
                out.append(np.frombuffer(datum.data, dtype=np.uint8).copy())
        if self._label:
            if not datum.HasField("label"):
                raise RecordError("holds no label (Datum.label) and label_available is set")
            out.append(np.array([datum.label], dtype=np.int32))
        return out


_VALUES = {Tensor.FLOAT: ("float_data", np.float32), Tensor.INT32: ("int32_data", np.int32),
           Tensor.INT64: ("int64_data", np.int64)}


def _values(tensor: Tensor, what: str, kinds: tuple[int, ...]) -> np.ndarray:
    if tensor.data_type not in kinds:
        allowed = " or ".join(Tensor.DataType.Name(k) for k in kinds)
        raise RecordError(f"holds a {_type_name(tensor)} tensor for {what}, expected {allowed}")
    field, dtype = _VALUES[tensor.data_type]
    return np.asarray(getattr(tensor, field), dtype=dtype)


def _type_name(tensor: Tensor) -> str:
    try:
        return Tensor.DataType.Name(tensor.data_type)
    except ValueError:
        return f"type {int(tensor.data_type)}"


class TensorProtosParser:
    """A ``TensorProtos`` record's outputs (``readers.caffe2``)."""

    def __init__(self, args: Mapping[str, Any], limits: EngineLimits) -> None:
        self._image = bool(args["image_available"])
        self._label_type = int(args["label_type"])
        self._num_labels = int(args["num_labels"])
        self._additional = int(args["additional_inputs"])
        self._bbox = bool(args["bbox"])
        self._limits = limits

    def __call__(self, value: memoryview) -> list[np.ndarray]:
        protos = caffe2_pb2.TensorProtos()
        try:
            protos.ParseFromString(value)  # type: ignore[arg-type]  # upb takes a buffer
        except DecodeError:
            raise RecordError(f"is not a Caffe2 TensorProtos ({len(value):,} bytes)") from None
        tensors = list(protos.protos)
        wanted = (self._image + (self._label_type != NO_LABEL)
                  + (self._label_type == MULTI_LABEL_WEIGHTED_SPARSE)
                  + self._additional + self._bbox)
        if len(tensors) < wanted:
            raise RecordError(f"holds {len(tensors)} tensors, the reader's arguments ask for "
                              f"{wanted}")
        for i, tensor in enumerate(tensors[:wanted]):
            if tensor.HasField("segment"):
                raise RecordError(f"holds a chunk of a tensor (tensor {i} has a segment)")
        out = []
        if self._image:
            out.append(self._image_of(tensors.pop(0)))
        if self._label_type != NO_LABEL:
            out.append(self._label_of(tensors))
        for i in range(self._additional):
            out.append(_values(tensors.pop(0), f"additional input {i}", tuple(_VALUES)))
        if self._bbox:
            box = _values(tensors.pop(0), "the bounding box", (Tensor.INT32,))
            if box.shape != (4,):
                raise RecordError(f"holds a bounding box of {box.size} values, expected 4")
            out.append(box)
        return out

    def _image_of(self, tensor: Tensor) -> np.ndarray:
        if tensor.data_type == Tensor.STRING:
            if not tensor.string_data:
                raise RecordError("holds an empty STRING tensor for the image")
            return np.frombuffer(tensor.string_data[0], dtype=np.uint8).copy()
        if tensor.data_type == Tensor.BYTE:
            dims = list(tensor.dims)
            if len(dims) not in (2, 3):
                raise RecordError(f"holds a raw image of dims {dims}, expected (H, W[, C])")
            channels = dims[2] if len(dims) == 3 else 1
            return _raw_image(tensor.byte_data, dims[0], dims[1], channels, self._limits,
                              channels_first=False)
        raise RecordError(f"holds a {_type_name(tensor)} tensor for the image, expected "
                          "STRING (encoded) or BYTE (raw)")

    def _label_of(self, tensors: list[Tensor]) -> np.ndarray:
        kinds = (Tensor.INT32, Tensor.FLOAT)
        labels = _values(tensors.pop(0), "the label", kinds)
        if self._label_type == SINGLE_LABEL:
            if labels.size != 1:
                raise RecordError(f"holds {labels.size} label values, expected one "
                                  "(label_type SINGLE_LABEL)")
            return labels
        if self._label_type == MULTI_LABEL_DENSE:
            return labels
        dtype = np.dtype(np.float32 if self._label_type == MULTI_LABEL_WEIGHTED_SPARSE
                         else labels.dtype)
        self._limits.check_output((self._num_labels,), dtype, "its label vector")
        indices = labels.astype(np.int64)
        if np.any(indices != labels) or np.any(indices < 0) or \
                np.any(indices >= self._num_labels):
            raise RecordError(f"holds label indices outside [0, num_labels = "
                              f"{self._num_labels})")
        out = np.zeros(self._num_labels, dtype=dtype)
        if self._label_type == MULTI_LABEL_SPARSE:
            out[indices] = 1
            return out
        weights = _values(tensors.pop(0), "the label weights", (Tensor.FLOAT,))
        if weights.size != indices.size:
            raise RecordError(f"holds {weights.size} label weights for {indices.size} "
                              "indices")
        out[indices] = weights
        return out


@register_reader(CAFFE)
@register_reader(CAFFE2)
def build_lmdb_reader(request: ReaderRequest) -> Reader:
    op_type, args = request.op_type, request.args
    paths = ReaderPaths(op_type, request.roots)
    records = LmdbRecords(op_type, args["path"], paths, request.limits)
    parse = DatumParser(args, request.limits) if op_type == CAFFE else \
        TensorProtosParser(args, request.limits)
    identity = ReaderIdentity(paths, records.files, args["verify"], derived=records.digests,
                              kind="database", derived_name="keys")
    return Reader(reader_stage(request, records.count, "records"),
                  LmdbSource(op_type, records, parse), identity, identity.count)


# -- behaviour probe (engine/identity/behaviour/) ------------------------------------------------


def _pixels(shape: tuple[int, ...]) -> bytes:
    return (np.arange(int(np.prod(shape)), dtype=np.int64) * 37 % 256).astype(np.uint8).tobytes()


@source_probe("readers.caffe")
def _caffe() -> list[np.ndarray]:
    out = reader_orders("readers.caffe")
    records = [caffe_pb2.Datum(data=b"\xff\xd8encoded", label=3, encoded=True),
               caffe_pb2.Datum(data=b"no encoded field", label=-7),
               caffe_pb2.Datum(channels=3, height=2, width=5, data=_pixels((3, 2, 5)),
                               label=1, encoded=False)]
    for image in (True, False):
        for label in (True, False):
            parse = DatumParser({"image_available": image, "label_available": label},
                                      NO_LIMITS)
            for record in records:
                out += parse(memoryview(record.SerializeToString()))
    return out


@source_probe("readers.caffe2")
def _caffe2() -> list[np.ndarray]:
    out = reader_orders("readers.caffe2")
    t = caffe2_pb2.TensorProto
    images = [t(data_type=t.STRING, string_data=[b"\x89PNG...", b"ignored"]),
              t(data_type=t.BYTE, dims=[2, 3, 3], byte_data=_pixels((2, 3, 3))),
              t(data_type=t.BYTE, dims=[3, 2], byte_data=_pixels((3, 2)))]
    labels = {0: [t(data_type=t.INT32, int32_data=[4])],
              1: [t(data_type=t.FLOAT, float_data=[0.0, 5.0, 2.0])],
              2: [t(data_type=t.FLOAT, float_data=[0.25, -1.5])],
              3: [t(data_type=t.INT32, int32_data=[1, 4]), t(data_type=t.FLOAT,
                                                             float_data=[0.5, 2.0])],
              4: []}
    extra = [t(data_type=t.INT64, int64_data=[1 << 40, -2]), t(data_type=t.FLOAT,
                                                                 float_data=[1.5]),
             t(data_type=t.INT32, int32_data=[1, 2, 3, 4])]
    for image in images:
        for label_type, label in labels.items():
            record = caffe2_pb2.TensorProtos(protos=[image, *label, *extra])
            parse = TensorProtosParser(
                {"image_available": True, "label_type": label_type, "num_labels": 6,
                 "additional_inputs": 2, "bbox": True}, NO_LIMITS)
            out += parse(memoryview(record.SerializeToString()))
    return out
