"""A generated stand-in for the folders of DALI_extra (DALI's test data repository) that
DALI's own checkpointing tests read: the same paths, filled by the project's generators.

The generators (OpenCV, LMDB) are imported where they are used: a parallel external
source's worker process imports the test module that defines its source, and with it this
one, and needs none of them."""

from __future__ import annotations

import tempfile
from pathlib import Path

#: Images per class folder under ``db/single/jpeg`` (47 in all: an odd count, so padded and
#: unpadded shards differ; enough for DALI's largest case, 5 shards of batches of 4 that stop
#: 3 batches into an epoch). The folders are named as DALI_extra's, numbers: ``134`` is the
#: one DALI's multiple-readers case takes its files from.
JPEG_CLASSES = {"100": 7, "117": 6, "134": 8, "151": 5, "168": 7, "185": 6, "202": 8}
LMDB_RECORDS = 53       # Caffe and Caffe2 databases: 3 shards of batches of 7, 3 batches in
WEBDATASET_SHARDS = (600, 550, 650)  # 1800 samples: 6 shards of batches of 64, 5 batches in
NUMPY_FILES = 111       # 6 shards of batches of 8, 3 batches in
TFRECORD_RECORDS = 60   # 10 shards of 3 or more; 6 shards of batches of 6, 2 batches in
COCO_IMAGES = 45        # 5 shards of batches of 6, 2 batches in; 3 padded shards of 7, 3 in


def make_dali_extra(root: Path) -> Path:
    """Write the data sets under ``root`` at DALI_extra's paths; ``root``."""
    from tests.support.images import make_image_folder
    from tests.support.lmdb_data import make_caffe, make_caffe2
    from tests.support.reader_data import make_npy_folder, make_shards
    from tests.support.record_data import write_coco, write_tfrecords

    db = root / "db"
    jpeg = db / "single" / "jpeg"
    make_image_folder(jpeg, counts=tuple(JPEG_CLASSES.values()))
    for k, name in enumerate(JPEG_CLASSES):
        (jpeg / f"class_{k}").rename(jpeg / name)
    make_caffe(db / "lmdb", LMDB_RECORDS)
    make_caffe2(db / "c2lmdb", LMDB_RECORDS)
    mnist = db / "webdataset" / "MNIST"
    for s, shard in enumerate(make_shards(mnist, WEBDATASET_SHARDS, prefix="devel")):
        shard.rename(mnist / f"devel-{s}.tar")
    make_npy_folder(db / "3D" / "MRI" / "Knee" / "npy_2d_slices" / "STU00001", NUMPY_FILES,
                    subfolders=0)
    tfrecord = db / "tfrecord"
    (record,), (index,) = write_tfrecords(tfrecord, [TFRECORD_RECORDS])
    Path(record).rename(tfrecord / "train")
    Path(index).rename(tfrecord / "train.idx")
    coco = db / "coco"
    _, annotations = write_coco(coco, COCO_IMAGES)
    Path(annotations).rename(coco / "instances.json")
    return root


def generate_temp_index_file(tar_file_path: str) -> tempfile._TemporaryFileWrapper[str]:
    """A webdataset index of ``tar_file_path`` in a temporary file (removed when closed or
    collected), as DALI's test helper of the same name gives."""
    from tests.support.reader_data import write_index

    index = tempfile.NamedTemporaryFile("w", suffix=".idx")  # noqa: SIM115
    write_index(Path(tar_file_path), Path(index.name))
    return index
