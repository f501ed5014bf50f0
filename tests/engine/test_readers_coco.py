"""``fn.readers.coco``: DALI's samples, boxes, labels and polygons from a COCO document, the
document bounded and checked field by field, and errors that name the entry or file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor import fn, pipeline_def
from conveyor.errors import (
    DataChanged,
    DataFileError,
    InvalidArgument,
    PermissionDenied,
    ResourceExhausted,
)
from conveyor_server import Pipeline
from conveyor_server.engine.admission.limits import EngineLimits
from conveyor_server.engine.data.listings import MemoryListings
from tests.support import record_data
from tests.support.resume import run_batches

DOCUMENT = {
    "images": [{"id": 30, "file_name": "c.jpg", "width": 50, "height": 20},
               {"id": 7, "file_name": "sub/a.jpg", "width": 40, "height": 10},
               {"id": 12, "file_name": "b.jpg", "width": 8, "height": 8}],
    "categories": [{"id": 44, "name": "x"}, {"id": 2, "name": "y"}],
    "annotations": [
        {"image_id": 30, "category_id": 2, "bbox": [10, 2, 20, 8],
         "segmentation": [[10, 2, 30, 2, 30, 10]]},
        {"image_id": 7, "category_id": 44, "bbox": [1.5, 1, 4, 0.05]},   # under 0.1: ignored
        {"image_id": 7, "category_id": 2, "bbox": [0, 0, 4, 5], "iscrowd": 1,
         "segmentation": {"size": [10, 40], "counts": "x"}},
        {"image_id": 30, "category_id": 44, "bbox": [0, 0, 5, 5],
         "segmentation": [[0, 0, 5, 0, 5, 5, 0, 5], [1, 1, 2, 1, 2, 2]]},
        {"image_id": 99, "category_id": 2, "bbox": [0, 0, 1, 1]},         # no such image
    ],
}


def write(root: Path, document: Any = DOCUMENT) -> tuple[str, str]:
    images = root / "images"
    for image in document["images"]:
        if "file_name" not in image:
            continue
        path = images / image["file_name"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"bytes of " + image["file_name"].encode())
    annotations = root / "annotations.json"
    annotations.write_text(json.dumps(document))
    return str(images), str(annotations)


@pipeline_def(batch_size=3, seed=4, enable_checkpointing=True)
def coco(file_root: str, annotations_file: str, **reader: Any) -> Any:
    return fn.readers.coco(file_root=file_root, annotations_file=annotations_file,
                           name="coco", **reader)


def samples(spec: Any, **kw: Any) -> list[list[np.ndarray]]:
    with Pipeline(spec, **kw) as pipe:
        batch = pipe.run()
    return [[np.asarray(out[s]) for out in batch] for s in range(len(batch[0]))]


def test_images_in_id_order_with_their_annotations_as_dali(tmp_path: Path) -> None:
    got = samples(coco(*write(tmp_path), polygon_masks=True, image_ids=True))
    assert [s[0].tobytes() for s in got] == [b"bytes of sub/a.jpg", b"bytes of b.jpg",
                                             b"bytes of c.jpg"]
    assert [s[5].tolist() for s in got] == [[7], [12], [30]]
    a, b, c = got
    # Image 7: the thin box is under size_threshold; the crowd box is kept (its RLE mask
    # gives no polygon).
    assert a[1].tolist() == [[0, 0, 4, 5]] and a[2].tolist() == [2]
    assert a[3].shape == (0, 3) and a[4].shape == (0, 2)
    assert b[1].shape == (0, 4) and b[2].dtype == np.int32 and b[2].shape == (0,)
    # Image 30: labels are the categories' positions from 1; polygons index the vertices.
    assert c[1].dtype == np.float32 and c[1].tolist() == [[10, 2, 20, 8], [0, 0, 5, 5]]
    assert c[2].tolist() == [2, 1]
    assert c[3].tolist() == [[0, 0, 3], [1, 3, 7], [1, 7, 10]]
    assert c[4][:3].tolist() == [[10, 2], [30, 2], [30, 10]]


def test_ltrb_ratio_crowds_empty_images_and_ids_as_written(tmp_path: Path) -> None:
    root, annotations = write(tmp_path)
    got = samples(coco(root, annotations, ltrb=True, ratio=True, polygon_masks=True))
    c = got[2]
    expected = np.array([[10, 2, 30, 10], [0, 0, 5, 5]], np.float32) / \
        np.array([50, 20, 50, 20], np.float32)
    assert np.array_equal(c[1], expected)
    assert np.array_equal(c[4][:3], np.array([[10, 2], [30, 2], [30, 10]], np.float32) /
                          np.array([50, 20], np.float32))
    got = samples(coco(root, annotations, skip_empty=True, include_iscrowd=False,
                       avoid_class_remapping=True, image_ids=True, batch_size=1))
    assert [s[3].item() for s in got] == [30]  # image 7 is left with no annotation
    assert got[0][2].tolist() == [2, 44]
    got = samples(coco(root, annotations, size_threshold=0.01, image_ids=True))
    assert got[0][2].tolist() == [1, 2]


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["annotations"][0].update(bbox=[1, 2, 3]), r"annotations\[0\].bbox must hold "
                                                           r"4 numbers, got 3"),
    (lambda d: d["images"][1].update(id="7"), r"images\[1\].id must be an integer"),
    (lambda d: d["images"][0].pop("file_name"), r"images\[0\] has no 'file_name'"),
    (lambda d: d["annotations"][3].update(category_id=5), r"annotations\[3\].category_id 5 is "
                                                          r"not among the categories"),
    (lambda d: d["annotations"][0].update(segmentation=[[1, 2, 3]]),
     r"annotations\[0\].segmentation\[0\] holds an odd number"),
    (lambda d: d.update(images={}), "'images' must be a list"),
    (lambda d: d["images"][2].update(width=0), r"images\[2\] is 0x8: ratio needs a positive"),
])
def test_a_malformed_document_is_refused_naming_the_entry(tmp_path: Path, change: Any,
                                                          message: str) -> None:
    document = json.loads(json.dumps(DOCUMENT))
    change(document)
    root, annotations = write(tmp_path, document)
    with pytest.raises(InvalidArgument, match=r"annotations file '<root 0>/annotations.json': "
                                              + message):
        Pipeline(coco(root, annotations, polygon_masks=True, ratio=True),
                 data_roots=[tmp_path])


def test_unreadable_documents_and_images_are_refused_naming_them(tmp_path: Path) -> None:
    root, annotations = write(tmp_path)
    Path(annotations).write_text("{not json")
    with pytest.raises(InvalidArgument, match=r"annotations file '.*annotations.json' is not "
                                              r"JSON"):
        Pipeline(coco(root, annotations))
    root, annotations = write(tmp_path)
    Path(root, "b.jpg").unlink()
    with pytest.raises(DataFileError, match=r"cannot read image '<root 0>/images/b.jpg'"):
        Pipeline(coco(root, annotations), data_roots=[tmp_path])
    with pytest.raises(PermissionDenied, match="outside the data roots"):
        Pipeline(coco(root, annotations), data_roots=[tmp_path / "images"])
    empty = {**DOCUMENT, "annotations": []}
    root, annotations = write(tmp_path / "empty", empty)
    with pytest.raises(InvalidArgument, match="lists no image to read"):
        Pipeline(coco(root, annotations, skip_empty=True))


def test_the_document_images_and_boxes_are_bounded_by_the_limits(tmp_path: Path) -> None:
    root, annotations = write(tmp_path)
    size = Path(annotations).stat().st_size
    with pytest.raises(ResourceExhausted, match=rf"annotations file '.*' is {size:,} bytes, "
                                                r"above the server's limit "
                                                r"limits.max_file_bytes = 100"):
        Pipeline(coco(root, annotations), limits=EngineLimits(max_file_bytes=100))
    Path(root, "b.jpg").write_bytes(bytes(5000))
    with Pipeline(coco(root, annotations), limits=EngineLimits(max_file_bytes=size)) as pipe, \
            pytest.raises(ResourceExhausted, match=rf"image '.*b.jpg' is 5,000 bytes, above "
                                                   rf"the server's limit limits.max_file_bytes "
                                                   rf"= {size:,}"):
        pipe.run()
    many = {"images": [{"id": 1, "file_name": "b.jpg", "width": 9, "height": 9}],
            "categories": [{"id": 1}],
            "annotations": [{"image_id": 1, "category_id": 1, "bbox": [0, 0, 1, 1]}] * 300}
    root, annotations = write(tmp_path / "many", many)
    with pytest.raises(ResourceExhausted, match=r"the boxes of image 'b.jpg' would be "
                                                r"300x4 float32"):
        Pipeline(coco(root, annotations, batch_size=1),
                 limits=EngineLimits(max_batch_bytes=4096))


def test_a_restore_over_changed_annotations_is_refused_naming_the_file(tmp_path: Path) -> None:
    root, annotations = record_data.write_coco(tmp_path / "data", 9)
    spec = coco(root, annotations, random_shuffle=True, verify="content")
    listings = MemoryListings()
    with Pipeline(spec, data_roots=[tmp_path], listings=listings) as pipe:
        run_batches(pipe, 2)
        blob = pipe.checkpoint()
    document = json.loads(Path(annotations).read_text())
    document["annotations"][0]["bbox"][0] += 1
    Path(annotations).write_text(json.dumps(document, indent=1))
    with pytest.raises(DataChanged, match=r"first change: file 0 "
                                          r"'<root 0>/data/annotations.json' changed "
                                          r"\(.*annotations\)"):
        Pipeline(spec, checkpoint=blob, data_roots=[tmp_path], listings=listings)
