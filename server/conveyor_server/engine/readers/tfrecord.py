"""``fn.readers.tfrecord``: ``tf.train.Example`` records of TFRecord files, as DALI's reader.

``path`` names the TFRecord files in reading order and ``index_path`` one index file per
file (DALI's ``tfrecord2idx`` format: ``offset size`` per record, the size counting the
framing; ``conveyor tfrecord-index`` writes them). The data set is every record of the
first file in index order, then of the next; the reader's order, sharding and padding
split that one sequence, as DALI's loader does. The indexes are read when the pipeline is
built (each record's place checked against its file's size) and their digest joins each
file's identity, so a restore over a file whose records moved is refused naming it.

At run time a record is read by offset (one ``pread``; in object storage one ranged GET,
fetched ahead as its batch starts: ``data/fetch_ahead.py``), its framing checked before its
data is trusted: the size the index gives against ``limits.max_file_bytes`` (records are
the data set's files) before anything is read, then the length the record declares
against the index's, and the masked CRC-32C of the length and of the data. The data is parsed with
TensorFlow's published ``Example`` message (``formats/example_pb2``, not TensorFlow).

Each feature of ``features`` (``conveyor.definition.tfrecord``) is one output: an int64 or float32
``FixedLenFeature`` is exactly its shape's values (``default_value`` everywhere when the
record lacks the feature); a ``VarLenFeature`` is every value, shaped ``(-1,
*partial_shape)`` (empty when the record lacks it); a string feature is its first value's
bytes as a 1-D uint8 array (the default's bytes when the record lacks it). A record whose
feature holds another type or another count than declared is DATA_LOSS naming the record
(``on_error`` applies).
"""

from __future__ import annotations

import hashlib
import math
import struct
from array import array
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from conveyor.definition.crc32c import masked_crc32c
from conveyor.definition.tfrecord import (
    FOOTER_BYTES,
    HEADER_BYTES,
    Feature,
    FixedLenFeature,
    RecordFramingError,
    VarLenFeature,
    check_header,
    decode_feature,
    float32,
    int64,
    string,
)
from conveyor.errors import DataFileError, InvalidArgument, ResourceExhausted, SpecError
from conveyor_server.engine.admission.limits import NO_LIMITS, EngineLimits
from conveyor_server.engine.data.file_list import unfit_name
from conveyor_server.engine.ops.probes.probe_set import source_probe
from conveyor_server.engine.readers.build import (
    Reader,
    ReaderRequest,
    reader_orders,
    reader_stage,
    register_reader,
)
from conveyor_server.engine.readers.data_paths import Located, ReaderPaths
from conveyor_server.engine.readers.formats import example_pb2
from conveyor_server.engine.readers.identity import ReaderIdentity

OP = "readers.tfrecord"
#: The smallest framed record: header and footer around no data.
MIN_RECORD_BYTES = HEADER_BYTES + FOOTER_BYTES
#: Which list of a ``Feature`` each dtype reads, and its numpy type.
_LISTS = {int64: ("int64_list", np.int64), float32: ("float_list", np.float32),
          string: ("bytes_list", np.uint8)}


class RecordError(ValueError):
    """What is wrong with a record (the source names it)."""


def parse_index(text: str, file_size: int) -> tuple[list[int], list[int]]:
    """The (offsets, sizes) an index file lists for a TFRecord file of ``file_size``
    bytes; RecordError names the line that is wrong."""
    offsets: list[int] = []
    sizes: list[int] = []
    for number, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or not (parts[0].isdigit() and parts[1].isdigit()):
            raise RecordError(f"line {number}: expected 'offset size' (two integers), got "
                              f"{line[:80]!r}")
        offset, size = int(parts[0]), int(parts[1])
        if size < MIN_RECORD_BYTES:
            raise RecordError(f"line {number}: a record of {size} bytes is shorter than its "
                              f"framing ({MIN_RECORD_BYTES} bytes)")
        if offset + size > file_size:
            raise RecordError(f"line {number}: the record ends at byte {offset + size:,}, "
                              f"beyond the file's {file_size:,} bytes")
        offsets.append(offset)
        sizes.append(size)
    if not offsets:
        raise RecordError("lists no record")
    return offsets, sizes


class FeatureParser:
    """An ``Example`` record's outputs, one per feature."""

    def __init__(self, features: Sequence[tuple[str, Feature]], limits: EngineLimits) -> None:
        self._features = features
        self._limits = limits
        self._defaults = [self._default(f) for _, f in features]

    @staticmethod
    def _default(feature: Feature) -> np.ndarray:
        if feature.dtype == string:
            return np.frombuffer(str(feature.default).encode("latin-1"), dtype=np.uint8).copy()
        dtype = _LISTS[feature.dtype][1]
        if feature.kind == "var":
            return np.zeros((0, *feature.shape), dtype=dtype)
        return np.full(feature.shape, feature.default, dtype=dtype)

    def __call__(self, data: bytes | memoryview) -> list[np.ndarray]:
        message = example_pb2.Example()
        try:
            message.ParseFromString(data)  # type: ignore[arg-type]  # upb takes a buffer
        except DecodeError:
            raise RecordError(f"is not a tf.train.Example ({len(data):,} bytes)") from None
        present = message.features.feature
        out = []
        for (name, feature), default in zip(self._features, self._defaults, strict=True):
            if name not in present:
                out.append(default.copy())
                continue
            out.append(self._values(name, feature, present[name], default))
        return out

    def _values(self, name: str, feature: Feature, value: example_pb2.Feature,
                default: np.ndarray) -> np.ndarray:
        field, dtype = _LISTS[feature.dtype]
        kind = value.WhichOneof("kind")
        if kind is not None and kind != field:
            raise RecordError(f"holds feature {name!r} as a {kind}, declared "
                              f"{feature.dtype} (a {field})")
        if feature.dtype == string:
            strings = value.bytes_list.value
            if not strings:
                return default.copy()
            self._limits.check_output((len(strings[0]),), "uint8", f"feature {name!r}")
            return np.frombuffer(strings[0], dtype=np.uint8).copy()
        values = getattr(value, field).value
        count = len(values)
        if feature.kind == "fixed":
            wanted = math.prod(feature.shape)
            if count != wanted:
                raise RecordError(f"holds {count} values of feature {name!r}, its "
                                  f"FixedLenFeature shape {list(feature.shape)} holds {wanted}")
            shape: tuple[int, ...] = feature.shape
        else:
            row = math.prod(feature.shape) if feature.shape else 1
            if row == 0 or count % row:
                raise RecordError(f"holds {count} values of feature {name!r}, not a "
                                  f"multiple of its partial shape {list(feature.shape)}")
            shape = (count // row, *feature.shape) if feature.shape else (count,)
        self._limits.check_output(shape, np.dtype(dtype), f"feature {name!r}")
        return np.asarray(values, dtype=dtype).reshape(shape)


class TfrecordIndex:
    """Every record of the data set: its file, offset and size."""

    def __init__(self, args: Mapping[str, Any], paths: ReaderPaths) -> None:
        files, indexes = args["path"] or (), args["index_path"] or ()
        if not files:
            raise SpecError(OP, "path", "needs at least one TFRecord file")
        if len(indexes) != len(files):
            raise SpecError(OP, "index_path", f"has {len(indexes)} entries for {len(files)} "
                            "files (one index file per TFRecord file; conveyor tfrecord-index "
                            "writes them)")
        for argument, values in (("path", files), ("index_path", indexes)):
            for i, value in enumerate(values):
                if why := unfit_name(value):
                    raise SpecError(OP, argument, f"entry {i} {value!r} {why}")
        self.files: list[Located] = []
        self.digests: list[str] = []
        file_of, offsets, sizes = array("i"), array("q"), array("q")
        for f, given in enumerate(files):
            located = paths.locate(given, "TFRecord file")
            text = paths.read_text(indexes[f], "index file")
            try:
                starts, lengths = parse_index(text, located.size)
            except RecordError as exc:
                raise DataFileError(f"{OP}: index file {paths.name(indexes[f])!r} of "
                                    f"{paths.name_of(located)!r}: {exc}") from None
            self.files.append(located)
            h = hashlib.sha256()
            for start, length in zip(starts, lengths, strict=True):
                h.update(b"%d %d\n" % (start, length))
            self.digests.append(h.hexdigest())
            file_of.extend([f] * len(starts))
            offsets.extend(starts)
            sizes.extend(lengths)
        self.count = len(file_of)
        if not self.count:
            raise InvalidArgument(f"{OP}: the index files list no record")
        self.file_of = np.frombuffer(file_of, dtype=np.int32)
        self.offsets = np.frombuffer(offsets, dtype=np.int64)
        self.sizes = np.frombuffer(sizes, dtype=np.int64)


class TfrecordSource:
    """Reads one record by offset, checks its framing and parses it into the outputs."""

    def __init__(self, index: TfrecordIndex, paths: ReaderPaths, parse: FeatureParser,
                 limits: EngineLimits) -> None:
        self._index = index
        self._paths = paths
        self._parse = parse
        self._limits = limits

    def where(self, index: int) -> str:
        located = self._index.files[self._index.file_of[index]]
        return f"{self._paths.name_of(located)}@{int(self._index.offsets[index])}"

    def _record(self, index: int) -> tuple[Located, int, int]:
        """The record's file, offset and size (framing included)."""
        return (self._index.files[self._index.file_of[index]], int(self._index.offsets[index]),
                int(self._index.sizes[index]))

    def _over_limit(self, size: int) -> bool:
        limit = self._limits.max_file_bytes
        return limit is not None and size - MIN_RECORD_BYTES > limit

    def fetch_ahead(self, indices: Sequence[int]) -> None:
        """Start fetching these records (one byte range each) from object storage; a
        record above the limit is not fetched (its read refuses it)."""
        wanted = []
        for index in indices:
            located, offset, size = self._record(index)
            if not self._over_limit(size):
                wanted.append((located, (offset, offset + size)))
        self._paths.fetch_ahead(wanted)

    def read(self, index: int) -> list[np.ndarray]:
        located, offset, size = self._record(index)
        data_bytes = size - MIN_RECORD_BYTES
        limit = self._limits.max_file_bytes
        if self._over_limit(size):
            raise ResourceExhausted(
                f"{OP}: record {self.where(index)!r} holds {data_bytes:,} bytes, above the "
                f"server's limit limits.max_file_bytes = {limit:,}; it was not read")
        blob = self._paths.read_range(located, offset, size, "TFRecord file")
        try:
            if len(blob) != size:
                raise RecordError(f"is cut short: the file ends {size - len(blob):,} bytes "
                                  "into it (the file changed since it was indexed)")
            try:
                length = check_header(blob[:HEADER_BYTES], offset)
            except RecordFramingError as exc:
                raise RecordError(str(exc)) from None
            if length != data_bytes:
                raise RecordError(f"declares {length:,} bytes of data, its index entry "
                                  f"{data_bytes:,} (a stale or wrong index file)")
            view = memoryview(blob)[HEADER_BYTES:HEADER_BYTES + length]
            (crc,) = struct.unpack_from("<I", blob, HEADER_BYTES + length)
            if masked_crc32c(view) != crc:
                raise RecordError("fails its data checksum (damaged)")
            return self._parse(view)
        except RecordError as exc:
            raise DataFileError(f"{OP}: record {self.where(index)} {exc}") from None


def features_of(args: Mapping[str, Any]) -> list[tuple[str, Feature]]:
    entries = args["features"] or ()
    if not entries:
        raise SpecError(OP, "features", "needs at least one feature")
    features = [decode_feature(entry) for entry in entries]
    names = [name for name, _ in features]
    if len(set(names)) != len(names):
        raise SpecError(OP, "features", "names a feature twice")
    return features


@register_reader(OP)
def build_tfrecord_reader(request: ReaderRequest) -> Reader:
    paths = ReaderPaths(OP, request.roots, request.files)
    parse = FeatureParser(features_of(request.args), request.limits)
    index = TfrecordIndex(request.args, paths)
    identity = ReaderIdentity(paths, index.files, request.args["verify"],
                              derived=index.digests, kind="TFRecord file",
                              derived_name="record index")
    return Reader(reader_stage(request, index.count, "records"),
                  TfrecordSource(index, paths, parse, request.limits), identity,
                  identity.count,
                  reads_objects=any(paths.is_object(f) for f in index.files))


# -- behaviour probe (engine/identity/behaviour/) ------------------------------------------------


@source_probe(OP)
def _tfrecord() -> list[np.ndarray]:
    out = reader_orders(OP)
    features = [("bytes", FixedLenFeature((), string, "none")),
                ("label", FixedLenFeature([], int64, -1)),
                ("pair", FixedLenFeature([2], int64, 0)),
                ("floats", VarLenFeature(float32, 0.0)),
                ("rows", VarLenFeature([2], float32, 0.0)),
                ("fixed_floats", FixedLenFeature([1, 2], float32, 0.5)),
                ("absent", FixedLenFeature([3], int64, 7)),
                ("absent_var", VarLenFeature([2], int64, 0))]
    parse = FeatureParser(features, NO_LIMITS)
    ex = example_pb2
    for i in range(3):
        present = {"bytes": ex.Feature(bytes_list=ex.BytesList(value=[b"x" * i, b"ignored"])),
                   "label": ex.Feature(int64_list=ex.Int64List(value=[-(1 << 40) + i])),
                   "pair": ex.Feature(int64_list=ex.Int64List(value=[i, -i])),
                   "floats": ex.Feature(float_list=ex.FloatList(value=[0.5] * (2 * i))),
                   "rows": ex.Feature(float_list=ex.FloatList(value=[1.25] * (2 * i))),
                   "fixed_floats": ex.Feature(float_list=ex.FloatList(value=[i, -i]))}
        if i == 2:
            del present["bytes"]
        record = ex.Example(features=ex.Features(feature=present))
        out += parse(record.SerializeToString())
    return out
