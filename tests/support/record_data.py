"""TFRecord files (with their index files) and COCO data sets, written byte for byte the
same by any Python: this module imports the standard library alone, so the DALI
comparison (``scripts/dali_readers_order.py``, run with DALI's own interpreter) and the
tests read the same files.

Records are ``tf.train.Example`` messages encoded here by hand (field numbers of
TensorFlow's ``example.proto`` and ``feature.proto``), framed as TFRecord files are: the
length (uint64, little-endian), its masked CRC-32C, the data, the data's masked CRC-32C.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path

_POLY = 0x82F63B78
_TABLE = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ _POLY if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), one byte at a time: slow, and independent of the reader's."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64s take ten bytes, as protobuf writes them
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


#: A feature's values: bytes values (a BytesList), floats (a FloatList) or ints (Int64List).
Values = Sequence[bytes] | Sequence[float] | Sequence[int]


def feature(values: Values, kind: str) -> bytes:
    """A ``Feature`` message of ``kind`` "bytes", "float" or "int64"."""
    if kind == "bytes":
        inner = b"".join(_field(1, v) for v in values if isinstance(v, bytes))
        return _field(1, inner)
    if kind == "float":
        packed = struct.pack(f"<{len(values)}f", *values)
        return _field(2, _field(1, packed) if values else b"")
    packed = b"".join(_varint(int(v)) for v in values if not isinstance(v, bytes))
    return _field(3, _field(1, packed) if values else b"")


def example(features: Mapping[str, tuple[Values, str]]) -> bytes:
    """An ``Example`` message: its ``Features`` map, one entry per feature."""
    entries = b"".join(_field(1, _field(1, name.encode()) + _field(2, feature(v, kind)))
                       for name, (v, kind) in features.items())
    return _field(1, entries)


def frame(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return (length + struct.pack("<I", masked(crc32c(length))) + data
            + struct.pack("<I", masked(crc32c(data))))


def tfrecord_sample(i: int) -> dict[str, tuple[Values, str]]:
    """Record ``i`` of the test data sets: bytes, a scalar label, a fixed pair, a list of
    floats of varying length (empty on every fourth record), text on odd records alone."""
    out: dict[str, tuple[Values, str]] = {
        "image/encoded": ([b"IMG%04d" % i + bytes(range(i % 7))], "bytes"),
        "image/class/label": ([(i * 7) % 5 - 1], "int64"),
        "pair": ([i, -i * 1000003], "int64"),
    }
    out["boxes"] = ([k * 0.25 + i for k in range((i % 4) * 2)], "float")
    if i % 2:
        out["text"] = ([b"odd %d" % i], "bytes")
    return out


def write_tfrecords(folder: Path, counts: Sequence[int], *,
                    indexes: bool = True) -> tuple[list[str], list[str]]:
    """TFRecord files of ``counts`` records (numbered across files) and, with ``indexes``,
    their index files (``offset size`` per record, as DALI's ``tfrecord2idx`` writes)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths, index_paths = [], []
    first = 0
    for f, count in enumerate(counts):
        path, index = folder / f"part-{f}.tfrecord", folder / f"part-{f}.idx"
        lines, blob = [], bytearray()
        for i in range(first, first + count):
            record = frame(example(tfrecord_sample(i)))
            lines.append(f"{len(blob)} {len(record)}\n")
            blob += record
        path.write_bytes(bytes(blob))
        if indexes:
            index.write_text("".join(lines))
        paths.append(str(path))
        index_paths.append(str(index))
        first += count
    return paths, index_paths


#: The COCO data set's categories: ids neither contiguous nor sorted, as real files have.
COCO_CATEGORIES = (90, 3, 17, 5)


def coco_image_bytes(image_id: int) -> bytes:
    """The bytes of image ``image_id`` (the readers output a file's bytes undecoded)."""
    return b"\xff\xd8COCO%05d" % image_id + bytes(image_id % 11)


def coco_document(count: int) -> dict:
    """``count`` images listed out of id order; 0 to 4 annotations each (none on every
    fourth image); some crowds, some boxes under a pixel, polygons on most."""
    ids = [(k * 37) % 101 + 1 for k in range(count)]
    images = [{"id": image_id, "file_name": f"img/{image_id:05d}.jpg",
               "width": 64 + image_id % 17, "height": 48 + image_id % 13} for image_id in ids]
    annotations: list[dict] = []
    for image_id in ids:
        for a in range(0 if image_id % 4 == 0 else image_id % 5):
            x, y = float(image_id % 9) + 0.5 * a, float(a * 3) + 0.25
            w, h = (0.5 if a == 3 else 4.0 + a), 6.5 - a
            ann = {"id": len(annotations) + 1, "image_id": image_id,
                   "category_id": COCO_CATEGORIES[(image_id + a) % len(COCO_CATEGORIES)],
                   "bbox": [x, y, w, h], "area": w * h,
                   "iscrowd": 1 if (image_id + a) % 7 == 0 else 0}
            if a != 2:
                corners = [x, y, x + w, y, x + w, y + h][:6 - 2 * (a % 2)]
                ann["segmentation"] = [[*corners, x, y + h] for _ in range(1 + a % 2)]
            annotations.append(ann)
    categories = [{"id": c, "name": f"cat{c}", "supercategory": "thing"}
                  for c in COCO_CATEGORIES]
    return {"info": {"description": "test"}, "images": images, "annotations": annotations,
            "categories": categories}


def write_coco(folder: Path, count: int = 13) -> tuple[str, str]:
    """The images under ``folder/images`` and the annotations file; (file_root,
    annotations_file)."""
    document = coco_document(count)
    root = folder / "images"
    for image in document["images"]:
        path = root / image["file_name"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(coco_image_bytes(image["id"]))
    annotations = folder / "annotations.json"
    annotations.write_text(json.dumps(document, indent=1))
    return str(root), str(annotations)
