"""Real LMDB databases for the Caffe and Caffe2 readers' tests, written with ``lmdb`` and
the published messages: real JPEGs (sizes vary), raw images, labels of every kind."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import cv2
import lmdb
import numpy as np

from conveyor_server.demo.sample_data import make_image
from conveyor_server.engine.readers.formats import caffe2_pb2, caffe_pb2

Tensor = caffe2_pb2.TensorProto


def jpeg(i: int) -> bytes:
    """Sample ``i``'s JPEG: its size varies with ``i``."""
    ok, data = cv2.imencode(".jpg", make_image(i, 24 + 4 * (i % 3), 32),
                            [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    return data.tobytes()


def key(i: int) -> bytes:
    """Record ``i``'s key, as Caffe's convert_imageset writes them: keys sort as numbered."""
    return f"{i:08d}_img{i}.jpg".encode()


def write_lmdb(folder: Path, records: Sequence[tuple[bytes, bytes]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    env = lmdb.open(str(folder), map_size=1 << 26)
    with env.begin(write=True) as txn:
        for k, v in records:
            txn.put(k, v)
    env.close()
    return folder


_CHANGE = """
import json, sys, lmdb
change = json.load(sys.stdin)
env = lmdb.open(change["folder"], map_size=1 << 26)
with env.begin(write=True) as txn:
    for k, v in change["put"].items():
        txn.put(bytes.fromhex(k), bytes.fromhex(v))
    for k in change["delete"]:
        txn.delete(bytes.fromhex(k))
"""


def change_lmdb(folder: Path, put: Mapping[bytes, bytes] | None = None,
                delete: Sequence[bytes] = ()) -> None:
    """Write to a database from another process, as a data set is changed under a server:
    ``lmdb`` refuses a second environment over the same files in one process."""
    change = {"folder": str(folder), "delete": [k.hex() for k in delete],
              "put": {k.hex(): v.hex() for k, v in (put or {}).items()}}
    subprocess.run([sys.executable, "-c", _CHANGE], input=json.dumps(change), text=True,
                   check=True, timeout=60)


def datum(i: int) -> bytes:
    """Record ``i`` of a Caffe LMDB: an encoded JPEG and the class ``i``."""
    return caffe_pb2.Datum(data=jpeg(i), label=i, encoded=True).SerializeToString()


def raw_datum(i: int) -> tuple[bytes, np.ndarray]:
    """A raw Datum (channel by channel, as Caffe stores it) and the HWC image it holds."""
    image = make_image(i, 5 + i % 3, 7)
    chw = np.ascontiguousarray(image.transpose(2, 0, 1))
    d = caffe_pb2.Datum(channels=3, height=image.shape[0], width=image.shape[1],
                        data=chw.tobytes(), label=i, encoded=False)
    return d.SerializeToString(), image


def make_caffe(folder: Path, count: int, first: int = 0,
               record: Callable[[int], bytes] = datum) -> Path:
    """A Caffe LMDB of records ``first .. first+count-1`` (record ``i`` holds class ``i``)."""
    return write_lmdb(folder, [(key(i), record(i)) for i in range(first, first + count)])


def caffe2_record(i: int, *, label_type: int = 0, additional: int = 0,
                  bbox: bool = False) -> bytes:
    """Record ``i`` of a Caffe2 LMDB: a JPEG, the label as ``label_type`` stores it, the
    additional tensors (``additional_values``) and a bounding box (``bbox_of``)."""
    protos = [Tensor(data_type=Tensor.STRING, string_data=[jpeg(i)])]
    if label_type == 0:
        protos.append(Tensor(data_type=Tensor.INT32, int32_data=[i]))
    elif label_type in (1, 3):
        protos.append(Tensor(data_type=Tensor.INT32, int32_data=sparse_indices(i)))
        if label_type == 3:
            protos.append(Tensor(data_type=Tensor.FLOAT,
                                 float_data=[0.5 + k for k in sparse_indices(i)]))
    elif label_type == 2:
        protos.append(Tensor(data_type=Tensor.FLOAT, float_data=[i / 4, -i / 8, 1.0]))
    for a in range(additional):
        values = additional_values(i, a)
        if values.dtype == np.int64:
            protos.append(Tensor(data_type=Tensor.INT64, int64_data=values.tolist()))
        else:
            protos.append(Tensor(data_type=Tensor.FLOAT, float_data=values.tolist()))
    if bbox:
        protos.append(Tensor(data_type=Tensor.INT32, int32_data=bbox_of(i).tolist()))
    return caffe2_pb2.TensorProtos(protos=protos).SerializeToString()


def sparse_indices(i: int) -> list[int]:
    return sorted({i % 7, (3 * i + 1) % 7})


def additional_values(i: int, a: int) -> np.ndarray:
    if a % 2:
        return np.arange(i % 4 + 1, dtype=np.int64) * 1000 + i
    return np.array([i * 0.25, a], dtype=np.float32)


def bbox_of(i: int) -> np.ndarray:
    return np.array([i, i + 1, 2 * i + 3, 2 * i + 5], dtype=np.int32)


def make_caffe2(folder: Path, count: int, first: int = 0, **kw: object) -> Path:
    return write_lmdb(folder, [(key(i), caffe2_record(i, **kw))  # type: ignore[arg-type]
                               for i in range(first, first + count)])
