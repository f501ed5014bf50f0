"""The numpy, webdataset, caffe, caffe2, tfrecord and coco readers in the shared properties
every reader meets: resume is exact at any position of every reader configuration
(``tests/support/resume.py``), and the stream does not depend on threads or prefetch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conveyor import fn, pipeline_def, types
from conveyor.definition import tfrecord as tfrec
from conveyor_server import Pipeline
from conveyor_server.engine.identity import checkpoint as ckpt
from tests.support.lmdb_data import make_caffe, make_caffe2
from tests.support.reader_data import make_npy_folder, make_shards
from tests.support.record_data import write_coco, write_tfrecords
from tests.support.resume import assert_resume_exact, assert_same_stream, run_batches


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """13 arrays of varying shapes under ``npy/``; 14 JPEG samples in 3 shards under
    ``wds/``; 13 JPEG records in 2 Caffe LMDBs under ``caffe/``, 11 in a Caffe2 one; 13
    records in 2 TFRecord files under ``tf/``; 13 COCO images under ``coco/``."""
    root = tmp_path_factory.mktemp("readers")
    make_npy_folder(root / "npy", count=13)
    make_shards(root / "wds", [5, 3, 6], jpeg=True)
    make_caffe(root / "caffe" / "a", 8)
    make_caffe(root / "caffe" / "b", 5, first=8)
    make_caffe2(root / "caffe2", 11, label_type=3, additional=1)
    write_tfrecords(root / "tf", [8, 5])
    write_coco(root / "coco", 13)
    return root


@pipeline_def(batch_size=4, num_threads=3, seed=21, enable_checkpointing=True)
def numpy_pipeline(root: str, **reader: Any) -> Any:
    arrays = fn.readers.numpy(file_root=f"{root}/npy", name="reader", **reader)
    return arrays, fn.random.normal(stddev=2.0, shape=(2,))


@pipeline_def(batch_size=4, num_threads=3, seed=21, enable_checkpointing=True)
def webdataset_pipeline(root: str, **reader: Any) -> Any:
    shards = sorted(str(p) for p in Path(root, "wds").glob("*.tar"))
    jpegs, labels = fn.readers.webdataset(paths=shards, ext=["jpg;jpeg", "cls"],
                                          dtypes=[types.UINT8, types.INT32], name="reader",
                                          **reader)
    angles = fn.random.uniform(range=(-20.0, 20.0))
    images = fn.rotate(fn.decoders.image(jpegs, output_type=types.RGB), angle=angles,
                       fill_value=0)
    return images, labels, angles


@pipeline_def(batch_size=4, num_threads=3, seed=21, enable_checkpointing=True)
def caffe_pipeline(root: str, **reader: Any) -> Any:
    jpegs, labels = fn.readers.caffe(path=[f"{root}/caffe/a", f"{root}/caffe/b"],
                                     name="reader", **reader)
    angles = fn.random.uniform(range=(-20.0, 20.0))
    images = fn.rotate(fn.decoders.image(jpegs, output_type=types.RGB), angle=angles,
                       fill_value=0)
    return images, labels, angles


@pipeline_def(batch_size=4, num_threads=3, seed=21, enable_checkpointing=True)
def caffe2_pipeline(root: str, **reader: Any) -> Any:
    jpegs, labels, extra = fn.readers.caffe2(path=f"{root}/caffe2", label_type=3, num_labels=7,
                                             additional_inputs=1, name="reader", **reader)
    return fn.decoders.image(jpegs, output_type=types.RGB), labels, extra


@pipeline_def(batch_size=4, num_threads=3, seed=21, enable_checkpointing=True)
def tfrecord_pipeline(root: str, **reader: Any) -> Any:
    files = [f"{root}/tf/part-{i}.tfrecord" for i in range(2)]
    out = fn.readers.tfrecord(
        path=files, index_path=[f"{root}/tf/part-{i}.idx" for i in range(2)], name="reader",
        features={"image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
                  "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1),
                  "boxes": tfrec.VarLenFeature([2], tfrec.float32, 0.0),
                  "text": tfrec.FixedLenFeature([], tfrec.string, "none")},
        **reader)
    return (*out.values(), fn.random.normal(stddev=2.0, shape=(2,)))


@pipeline_def(batch_size=4, num_threads=3, seed=21, enable_checkpointing=True)
def coco_pipeline(root: str, **reader: Any) -> Any:
    images, boxes, labels, polygons, vertices, ids = fn.readers.coco(
        file_root=f"{root}/coco/images", annotations_file=f"{root}/coco/annotations.json",
        polygon_masks=True, image_ids=True, ltrb=True, name="reader", **reader)
    return images, boxes, labels, polygons, vertices, ids, fn.random.uniform(range=(0.0, 1.0))


PIPELINES = {"numpy": numpy_pipeline, "webdataset": webdataset_pipeline,
             "caffe": caffe_pipeline, "caffe2": caffe2_pipeline,
             "tfrecord": tfrecord_pipeline, "coco": coco_pipeline}
#: Readers without ``shuffle_after_epoch`` (DALI's LMDB readers have none).
NO_SHUFFLE_AFTER_EPOCH = {"caffe", "caffe2"}
CASES = [
    ("plain_b4", {}, 4),
    ("plain_b5", {}, 5),
    ("shuffle_pad_b4", {"random_shuffle": True, "pad_last_batch": True}, 4),
    ("sae_b3", {"shuffle_after_epoch": True}, 3),
    ("s3_id0_shuffle_b2", {"num_shards": 3, "shard_id": 0, "random_shuffle": True}, 2),
    ("s3_id1_stick_pad_b3", {"num_shards": 3, "shard_id": 1, "stick_to_shard": True,
                             "pad_last_batch": True}, 3),
    ("s3_id2_pad_shuffle_b4", {"num_shards": 3, "shard_id": 2, "pad_last_batch": True,
                               "random_shuffle": True}, 4),
]


@pytest.mark.parametrize("reader", sorted(PIPELINES))
@pytest.mark.parametrize(("name", "args", "batch"), CASES, ids=[c[0] for c in CASES])
def test_resume_is_exact_for_every_reader_configuration(
        root: Path, reader: str, name: str, args: dict[str, Any], batch: int) -> None:
    if "shuffle_after_epoch" in args and reader in NO_SHUFFLE_AFTER_EPOCH:
        pytest.skip(f"readers.{reader} has no shuffle_after_epoch")
    spec = PIPELINES[reader](str(root), batch_size=batch, **args)
    with Pipeline(spec) as probe:
        epoch = probe._plan.readers[0].stage.epoch_length(0)
    per_epoch = -(-epoch // batch)
    for before in sorted({0, 1, per_epoch - 1, per_epoch, 3 * per_epoch + 1}):
        assert_resume_exact(spec, before, per_epoch + 2)


@pytest.mark.parametrize("reader", sorted(PIPELINES))
@pytest.mark.parametrize(("threads", "depth"), [(1, 1), (4, 1), (1, 4), (2, 3)])
def test_stream_does_not_depend_on_threads_or_prefetch(
        root: Path, reader: str, threads: int, depth: int) -> None:
    make = PIPELINES[reader]
    base = make(str(root), random_shuffle=True, num_threads=1, prefetch_queue_depth=1)
    other = make(str(root), random_shuffle=True, num_threads=threads,
                 prefetch_queue_depth=depth)
    with Pipeline(base) as a, Pipeline(other) as b:
        assert_same_stream(run_batches(a, 8), run_batches(b, 8), f"{threads} threads, "
                           f"{depth} deep")
        assert ckpt.open_blob(a.checkpoint()).fingerprint == \
            ckpt.open_blob(b.checkpoint()).fingerprint
