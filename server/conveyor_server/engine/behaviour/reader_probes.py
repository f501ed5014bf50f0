"""Probes of the numpy and webdataset readers: their order, and what they make of the
bytes of canonical files built in memory.

``readers.numpy``: arrays of every dtype written in C and Fortran order, in both byte
orders, with a scalar and an empty one, parsed and read back as the reader does.
``readers.webdataset``: a tar archive with multi-member samples, hidden files, folders,
multi-dot and upper-case extensions, and a DALI index file, grouped into samples and
matched to outputs under each ``missing_component_behavior`` and case rule.
``readers.caffe`` and ``readers.caffe2``: canonical records (encoded and raw images, every
label type, additional inputs, a bounding box) built in memory and parsed as the readers
parse them, under each flag.
"""

from __future__ import annotations

import io
import tarfile

import numpy as np
from numpy.lib import format as npy

from conveyor_server.engine.behaviour.probe_set import source_probe
from conveyor_server.engine.limits import NO_LIMITS
from conveyor_server.engine.readers import caffe, npy_format, tar_index
from conveyor_server.engine.readers.formats import caffe2_pb2, caffe_pb2
from conveyor_server.engine.readers.webdataset import Outputs
from conveyor_server.engine.stages.file_reader import FileReaderStage


def _orders(op_type: str) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    for n, options in ((9, {"random_shuffle": True}),
                       (100, {"num_shards": 3, "shard_id": 2, "pad_last_batch": True})):
        stage = FileReaderStage(5, n, batch_size=4, seed=0x5EED, op_type=op_type, **options)
        out += [stage.order(epoch) for epoch in range(2)]
    return out


def _npy_bytes(array: np.ndarray, fortran: bool) -> bytes:
    f = io.BytesIO()
    npy.write_array(f, np.asfortranarray(array) if fortran else array, version=(1, 0))
    return f.getvalue()


@source_probe("readers.numpy")
def _numpy() -> list[np.ndarray]:
    out = _orders("readers.numpy")
    base = (np.arange(60, dtype=np.int64) * 2654435761 % 1000 - 500).reshape(3, 4, 5)
    for name in npy_format.DTYPES:
        for dtype in (np.dtype(name).newbyteorder("<"), np.dtype(name).newbyteorder(">")):
            for array in (base.astype(dtype), base[0].astype(dtype),
                          np.asarray(7, dtype=dtype), np.zeros((0, 3), dtype=dtype)):
                for fortran in (False, True):
                    f = io.BytesIO(_npy_bytes(array, fortran))
                    out.append(npy_format.read_data(f, npy_format.read_header(f)))
    return out


def _tar() -> bytes:
    f = io.BytesIO()
    members = [("a/000.jpg", 5), ("a/000.cls", 4), ("a/000.seg.png", 3), ("a/.hidden", 2),
               ("a/001.JPG", 6), ("a/001.txt", 1), ("002.cls", 8), ("002.jpeg", 7),
               ("003", 2), ("004.cls", 4)]
    with tarfile.open(fileobj=f, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for name, kind in (("a", tarfile.DIRTYPE), ("a/link.jpg", tarfile.SYMTYPE)):
            entry = tarfile.TarInfo(name)
            entry.type, entry.mtime = kind, 0
            archive.addfile(entry)
        for i, (member, size) in enumerate(members):
            info = tarfile.TarInfo(member)
            info.size, info.mtime = size, 0
            archive.addfile(info, io.BytesIO(bytes([i]) * size))
    return f.getvalue()


@source_probe("readers.webdataset")
def _webdataset() -> list[np.ndarray]:
    out = _orders("readers.webdataset")
    data = _tar()
    index = "v1.2 2\njpg 512 5 x.jpg cls 1536 4 x.cls\ncls 2560 8 y.cls\n"
    groups = (tar_index.read_tar(io.BytesIO(data), len(data)),
              tar_index.parse_index(index, len(data)))
    for samples in groups:
        out.append(np.frombuffer(tar_index.index_digest(samples).encode(), dtype=np.uint8))
        for ext, case, missing in (("jpg;jpeg", True, "empty"), ("jpg;jpeg", False, "skip"),
                                   ("cls", True, "skip")):
            rules = Outputs.from_args({"ext": (ext, "cls"), "dtypes": ("uint8", "int32"),
                                       "case_sensitive_extensions": case,
                                       "missing_component_behavior": missing})
            for sample in samples:
                chosen = rules.match(sample, "probe")
                keys = np.frombuffer(sample.key.encode(), dtype=np.uint8)
                out += [keys, np.asarray(chosen if chosen is not None else [], np.int64)]
    return out


def _pixels(shape: tuple[int, ...]) -> bytes:
    return (np.arange(int(np.prod(shape)), dtype=np.int64) * 37 % 256).astype(np.uint8).tobytes()


@source_probe("readers.caffe")
def _caffe() -> list[np.ndarray]:
    out = _orders("readers.caffe")
    records = [caffe_pb2.Datum(data=b"\xff\xd8encoded", label=3, encoded=True),
               caffe_pb2.Datum(data=b"no encoded field", label=-7),
               caffe_pb2.Datum(channels=3, height=2, width=5, data=_pixels((3, 2, 5)),
                               label=1, encoded=False)]
    for image in (True, False):
        for label in (True, False):
            parse = caffe.DatumParser({"image_available": image, "label_available": label},
                                      NO_LIMITS)
            for record in records:
                out += parse(memoryview(record.SerializeToString()))
    return out


@source_probe("readers.caffe2")
def _caffe2() -> list[np.ndarray]:
    out = _orders("readers.caffe2")
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
            parse = caffe.TensorProtosParser(
                {"image_available": True, "label_type": label_type, "num_labels": 6,
                 "additional_inputs": 2, "bbox": True}, NO_LIMITS)
            out += parse(memoryview(record.SerializeToString()))
    return out
