"""The TFRecord and COCO readers served: a pipeline over real TFRecord files and a real COCO
data set, checkpointed on one server and restored on another, byte for byte; a damaged
record is DATA_LOSS and changed annotations DATA_CHANGED over the wire, named below the data
root; an image the document places outside the data roots is PERMISSION_DENIED."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor import errors, fn, pipeline_def
from conveyor.definition import tfrecord as tfrec
from conveyor_server import Pipeline
from tests.support.record_data import write_coco, write_tfrecords
from tests.support.resume import assert_same_stream, run_batches
from tests.support.servers import Start, client


@pipeline_def(batch_size=3, num_threads=2, seed=23, enable_checkpointing=True)
def both_record_readers(root: str) -> Any:
    inputs = fn.readers.tfrecord(
        path=[f"{root}/tf/part-{i}.tfrecord" for i in range(2)],
        index_path=[f"{root}/tf/part-{i}.idx" for i in range(2)],
        features={"image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
                  "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1),
                  "boxes": tfrec.VarLenFeature([2], tfrec.float32, 0.0)},
        random_shuffle=True, num_shards=2, shard_id=1, name="records")
    images, boxes, labels, ids = fn.readers.coco(
        file_root=f"{root}/coco/images", annotations_file=f"{root}/coco/annotations.json",
        ltrb=True, image_ids=True, shuffle_after_epoch=True, name="coco")
    return (inputs["image/encoded"], inputs["image/class/label"], inputs["boxes"], images,
            boxes, labels, ids, fn.random.uniform(range=(0.0, 1.0)))


def make_data(root: Path) -> None:
    write_tfrecords(root / "tf", [6, 5])
    write_coco(root / "coco", 9)


def test_a_pipeline_over_both_readers_restores_exactly_on_another_server(
        start_server: Start, tmp_path: Path) -> None:
    root = tmp_path / "root"
    make_data(root)
    a, b = start_server(roots=[root]), start_server(roots=[root])
    spec = both_record_readers(str(root))
    with client(a) as ca, client(b) as cb:
        pipe = ca.create("records", spec)
        first = run_batches(pipe, 4)  # type: ignore[arg-type]
        saved = pipe.checkpoint()
        expected = run_batches(pipe, 7)  # type: ignore[arg-type]  # past the shard rotation
        restored = cb.restore("records", checkpoint=saved.id)
        got = run_batches(restored, 7)  # type: ignore[arg-type]
    assert_same_stream(expected, got, "restored on server B")
    _, labels, boxes, _, coco_boxes, coco_labels, ids, _ = got[0]
    assert labels.dtype == np.int64 and boxes.dtype == np.float32
    assert coco_boxes.dtype == np.float32 and coco_labels.dtype == np.int32
    assert all(i.shape == (1,) for i in ids)
    with Pipeline(spec, data_roots=[root]) as local:
        assert_same_stream(run_batches(local, 11), first + expected, "in process")


def test_damaged_records_changed_annotations_and_escapes_over_the_wire(
        start_server: Start, tmp_path: Path) -> None:
    root = tmp_path / "root"
    make_data(root)
    a, b = start_server(roots=[root]), start_server(roots=[root])
    spec = both_record_readers(str(root))
    with client(a) as ca, client(b) as cb:
        pipe = ca.create("edited", spec)
        pipe.run()
        saved = pipe.checkpoint()
        annotations = root / "coco" / "annotations.json"
        document = json.loads(annotations.read_text())
        document["annotations"][1]["category_id"] = 3
        annotations.write_text(json.dumps(document))
        with pytest.raises(errors.DataChanged,
                           match=r"reader 'coco' \(op 1\): the data set changed: .*first "
                                 r"change: file 0 '<root 0>/coco/annotations.json' changed"
                           ) as refused:
            cb.restore("edited", checkpoint=saved.id)
        assert str(root) not in str(refused.value)

        paths, indexes = write_tfrecords(root / "broken", [2])
        blob = bytearray(Path(paths[0]).read_bytes())
        blob[20] ^= 0xFF
        Path(paths[0]).write_bytes(bytes(blob))

        @pipeline_def(batch_size=2, seed=1)
        def records() -> Any:
            return fn.readers.tfrecord(path=paths, index_path=indexes, features={
                "pair": tfrec.FixedLenFeature([2], tfrec.int64, 0)})["pair"]

        broken = ca.create("broken", records())
        with pytest.raises(errors.DataLoss, match=r"record <root 0>/broken/part-0.tfrecord@0 "
                                                  r"fails its data checksum"):
            broken.run()

        outside = tmp_path / "outside.jpg"
        outside.write_bytes(b"x")
        document["images"][0]["file_name"] = "../../../outside.jpg"
        annotations.write_text(json.dumps(document))
        with pytest.raises(errors.PermissionDenied, match=r"image '.*outside.jpg' is outside "
                                                          r"the data roots"):
            ca.create("escape", spec)
