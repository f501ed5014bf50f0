"""``fn.readers.caffe`` and ``fn.readers.caffe2`` over real LMDBs: DALI's outputs, order,
sharding and shard rotation; records bounded before they are parsed; corrupt records and
changed databases named below their data root."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor import fn, pipeline_def
from conveyor.definition.schemas import registry as schema
from conveyor.errors import (
    DataChanged,
    DataFileError,
    PermissionDenied,
    ResourceExhausted,
    SpecError,
)
from conveyor.v1 import pipeline_pb2
from conveyor_server import Pipeline
from conveyor_server.engine.admission.limits import EngineLimits
from conveyor_server.engine.data.listings import MemoryListings
from conveyor_server.engine.readers.formats import caffe_pb2
from tests.support.lmdb_data import (
    additional_values,
    bbox_of,
    change_lmdb,
    datum,
    jpeg,
    key,
    make_caffe,
    make_caffe2,
    raw_datum,
    sparse_indices,
    write_lmdb,
)
from tests.support.resume import batch_bytes, run_batches


@pipeline_def(batch_size=1, seed=5, enable_checkpointing=True)
def caffe(paths: list[Path], **reader: Any) -> Any:
    return fn.readers.caffe(path=[str(p) for p in paths], name="db", **reader)


@pipeline_def(batch_size=1, seed=5, enable_checkpointing=True)
def caffe2(paths: list[Path], **reader: Any) -> Any:
    return fn.readers.caffe2(path=[str(p) for p in paths], name="db", **reader)


def labels(spec: Any, samples: int, **kw: Any) -> list[int]:
    with Pipeline(spec, **kw) as pipe:
        return [int(batch[-1][0][0]) for batch in run_batches(pipe, samples)]


def test_records_come_in_key_order_across_databases_with_their_bytes(tmp_path: Path) -> None:
    first = tmp_path / "a"
    order = list(range(5))
    random.Random(1).shuffle(order)  # written out of order: LMDB keeps keys sorted
    write_lmdb(first, [(key(i), datum(i)) for i in order])
    second = make_caffe(tmp_path / "b", 3, first=5)
    with Pipeline(caffe([first, second], batch_size=4)) as pipe:
        assert pipe.epoch_size() == 8
        batches = run_batches(pipe, 3)  # 12 samples: the epoch, then 4 again
    images = [a for b in batches for a in b[0]]
    classes = [c for b in batches for c in b[1]]
    for n, (image, label) in enumerate(zip(images, classes, strict=True)):
        assert image.dtype == np.uint8 and image.tobytes() == jpeg(n % 8)
        assert label.dtype == np.int32 and label.shape == (1,) and int(label[0]) == n % 8


def test_sharding_and_rotation_follow_dalis_loader(tmp_path: Path) -> None:
    db = make_caffe(tmp_path / "db", 10)
    # 10 records, 3 shards: [0,3) [3,6) [6,10); without stick_to_shard the reader moves to
    # the next shard after each pass (DALI's virtual shard), with it it stays.
    rotating = labels(caffe([db], num_shards=3, shard_id=1), 3 + 4 + 3 + 3)
    assert rotating == [3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5]
    sticky = labels(caffe([db], num_shards=3, shard_id=1, stick_to_shard=True), 6)
    assert sticky == [3, 4, 5, 3, 4, 5]
    padded = labels(caffe([db], num_shards=3, shard_id=0, pad_last_batch=True,
                          batch_size=1), 8)
    assert padded == [0, 1, 2, 2, 3, 4, 5, 5]  # every shard padded to the largest (4)
    shuffled = labels(caffe([db], num_shards=3, shard_id=2, random_shuffle=True), 4)
    assert sorted(shuffled) == [6, 7, 8, 9]
    with pytest.raises(SpecError, match="shard_id"):
        Pipeline(caffe([db], num_shards=3, shard_id=3))
    with pytest.raises(SpecError, match="shuffle_after_epoch"):
        caffe([db], shuffle_after_epoch=True)  # DALI's LMDB readers have none


def test_raw_datums_become_hwc_images_and_flags_choose_the_outputs(tmp_path: Path) -> None:
    records = [raw_datum(i) for i in range(4)]
    db = write_lmdb(tmp_path / "raw", [(key(i), r) for i, (r, _) in enumerate(records)])
    with Pipeline(caffe([db])) as pipe:
        for i in range(4):
            image, label = pipe.run()
            assert np.array_equal(image[0], records[i][1]) and int(label[0][0]) == i
    with Pipeline(caffe([db], image_available=False)) as pipe:
        (only,) = pipe.run()
        assert only[0].tolist() == [0]
    with Pipeline(caffe([db], label_available=False)) as pipe:
        (only,) = pipe.run()
        assert only[0].shape == records[0][1].shape


@pytest.mark.parametrize("label_type", [0, 1, 2, 3, 4])
def test_caffe2_label_types_additional_inputs_and_bbox(tmp_path: Path, label_type: int) -> None:
    db = make_caffe2(tmp_path / "c2", 6, label_type=label_type, additional=2, bbox=True)
    spec = caffe2([db], label_type=label_type, num_labels=7, additional_inputs=2, bbox=True)
    with Pipeline(spec) as pipe:
        for i in range(6):
            out = [o[0] for o in pipe.run()]
            assert len(out) == (4 if label_type == 4 else 5)
            assert out[0].tobytes() == jpeg(i)
            rest = out[1:]
            if label_type != 4:
                label = rest.pop(0)
                if label_type == 0:
                    assert label.dtype == np.int32 and label.tolist() == [i]
                elif label_type == 2:
                    assert label.dtype == np.float32 and label.tolist() == [i / 4, -i / 8, 1]
                else:
                    expected = np.zeros(7, np.float32 if label_type == 3 else np.int32)
                    for k in sparse_indices(i):
                        expected[k] = 0.5 + k if label_type == 3 else 1
                    assert label.dtype == expected.dtype and np.array_equal(label, expected)
            for a in range(2):
                value = rest.pop(0)
                assert value.dtype == additional_values(i, a).dtype
                assert np.array_equal(value, additional_values(i, a))
            assert np.array_equal(rest.pop(0), bbox_of(i))


def test_caffe2_records_that_lack_what_the_arguments_ask_for_are_named(tmp_path: Path) -> None:
    db = make_caffe2(tmp_path / "c2", 3, label_type=1)
    with Pipeline(caffe2([db], label_type=1, num_labels=3), data_roots=[tmp_path]) as pipe, \
            pytest.raises(DataFileError, match=r"record '<root 0>/c2' at key "
                                               r"'00000001_img1.jpg' holds label indices "
                                               r"outside \[0, num_labels = 3\)"):
        run_batches(pipe, 3)
    with Pipeline(caffe2([db], additional_inputs=3), data_roots=[tmp_path]) as pipe, \
            pytest.raises(DataFileError, match="holds 2 tensors, the reader's arguments ask "
                                               "for 5"):
        pipe.run()


def test_corrupt_records_are_data_loss_naming_them_or_skipped(tmp_path: Path) -> None:
    db = write_lmdb(tmp_path / "db", [(key(0), datum(0)), (key(1), b"\xff\xff\xff not a datum"),
                                      (key(2), datum(2)), (key(3), datum(3))])

    @pipeline_def(batch_size=4, seed=4)
    def four(on_error: str) -> Any:
        return fn.readers.caffe(path=str(db), on_error=on_error)

    with Pipeline(four("fail"), data_roots=[tmp_path]) as pipe:
        with pytest.raises(DataFileError, match=r"readers.caffe: record '<root 0>/db' at key "
                                                r"'00000001_img1.jpg' is not a Caffe Datum") \
                as failed:
            pipe.run()
        assert str(tmp_path) not in str(failed.value)
    with Pipeline(four("skip"), data_roots=[tmp_path]) as pipe:
        _, classes = pipe.run()
        assert [int(c[0]) for c in classes] == [0, 2, 3] and pipe.samples_skipped == 1


def test_records_and_raw_images_are_bounded_before_they_are_parsed(tmp_path: Path) -> None:
    db = make_caffe(tmp_path / "db", 2)
    with Pipeline(caffe([db]), limits=EngineLimits(max_file_bytes=100),
                  data_roots=[tmp_path]) as pipe, \
            pytest.raises(ResourceExhausted, match=r"record '<root 0>/db' at key "
                                                   r"'00000000_img0.jpg' is \d+ bytes, above "
                                                   r"the server's limit limits.max_file_bytes"):
        pipe.run()
    huge = caffe_pb2.Datum(channels=3, height=1 << 20, width=1 << 20, data=b"x", label=0,
                           encoded=False).SerializeToString()
    raw = write_lmdb(tmp_path / "raw", [(key(0), huge)])
    with Pipeline(caffe([raw]), limits=EngineLimits(max_image_pixels=1 << 24)) as pipe, \
            pytest.raises(ResourceExhausted, match="max_image_pixels"):
        pipe.run()
    with Pipeline(caffe([raw])) as pipe, \
            pytest.raises(DataFileError, match="declares a raw 1048576x1048576x3 image but "
                                               "holds 1 bytes"):
        pipe.run()
    sparse = make_caffe2(tmp_path / "sparse", 1, label_type=1)
    with Pipeline(caffe2([sparse], label_type=1, num_labels=1 << 24),
                  limits=EngineLimits(max_batch_bytes=1 << 20)) as pipe, \
            pytest.raises(ResourceExhausted, match="label vector.*max_batch_bytes"):
        pipe.run()


def test_a_changed_database_is_refused_on_restore_naming_it(tmp_path: Path) -> None:
    root = tmp_path / "data"
    db = make_caffe(root / "train", 6)
    spec = caffe([db], random_shuffle=True, batch_size=2)
    listings = MemoryListings()
    with Pipeline(spec, data_roots=[root], listings=listings) as pipe:
        run_batches(pipe, 2)
        blob = pipe.checkpoint()
        expected = batch_bytes(pipe.run())
    with Pipeline(spec, checkpoint=blob, data_roots=[root], listings=listings) as again:
        assert batch_bytes(again.run()) == expected
    change_lmdb(db, put={key(3): datum(4)})  # the same keys, one record rewritten
    with pytest.raises(DataChanged, match=r"reader 'db' \(op 0\): the data set changed: .*"
                                          r"first change: database 0 "
                                          r"'<root 0>/train/data.mdb' changed") as refused:
        Pipeline(spec, checkpoint=blob, data_roots=[root], listings=listings)
    assert str(root) not in str(refused.value)


def test_a_key_gone_since_listing_is_data_loss(tmp_path: Path) -> None:
    db = make_caffe(tmp_path / "db", 3)
    with Pipeline(caffe([db]), data_roots=[tmp_path]) as pipe:
        change_lmdb(db, delete=[key(1)])
        pipe.run()
        with pytest.raises(DataFileError, match=r"record '<root 0>/db' at key "
                                                r"'00000001_img1.jpg' is no longer in the "
                                                "database"):
            pipe.run()


def test_databases_are_checked_against_the_data_roots(tmp_path: Path) -> None:
    inside, outside = tmp_path / "in", tmp_path / "out"
    db = make_caffe(outside / "db", 2)
    inside.mkdir()
    (inside / "link").symlink_to(db)
    for path in (db, inside / "link"):
        with pytest.raises(PermissionDenied, match="outside the data roots"):
            Pipeline(caffe([path]), data_roots=[inside])
    (inside / "empty").mkdir()
    with pytest.raises(DataFileError, match=r"cannot read database '<root 0>/empty/data.mdb'"):
        Pipeline(caffe([inside / "empty"]), data_roots=[inside])


def test_the_definition_api_counts_outputs_as_dali(tmp_path: Path) -> None:
    @pipeline_def(batch_size=1)
    def outputs(op: str, **kw: Any) -> Any:
        out = getattr(fn.readers, op)(path="x", **kw)
        return out if isinstance(out, tuple) else (out,)

    counts = {
        ("caffe", ()): 2, ("caffe", (("image_available", False),)): 1,
        ("caffe2", ()): 2, ("caffe2", (("label_type", 4),)): 1,
        ("caffe2", (("label_type", 3), ("additional_inputs", 3), ("bbox", True))): 6,
        ("caffe2", (("image_available", False), ("label_type", 4), ("bbox", True))): 1,
    }
    for (op, kw), count in counts.items():
        assert outputs(op, **dict(kw)).spec.ops[0].num_outputs == count, (op, kw)
    with pytest.raises(SpecError, match="label_type"):
        outputs("caffe2", label_type=5)
    # A spec from the wire is counted before it is validated: a huge count counts none.
    wire = pipeline_pb2.OpSpec(type="readers.caffe2")
    wire.args["path"].s = "x"
    wire.args["additional_inputs"].i = 10**12
    assert schema.num_outputs(wire) == 2


def _leaf_pages(data: bytes, page: int = 4096) -> list[int]:
    """The numbers of the B-tree leaf pages of an LMDB file (``mp_flags`` & P_LEAF)."""
    return [n for n in range(2, len(data) // page)
            if int.from_bytes(data[n * page + 10:n * page + 12], "little") & 0x02]


def test_a_damaged_or_truncated_database_is_data_loss_not_the_end_of_the_process(
        tmp_path: Path) -> None:
    # LMDB trusts its file: walking a damaged leaf aborts (an assertion), a page past the end
    # of a cut copy is SIGBUS. Both killed the process that built the pipeline.
    records = [(key(i), caffe_pb2.Datum(data=bytes([i % 256]) * 300, label=i)
                .SerializeToString()) for i in range(400)]
    damaged, cut = write_lmdb(tmp_path / "damaged", records), write_lmdb(tmp_path / "cut", records)
    data = bytearray((damaged / "data.mdb").read_bytes())
    leaf = _leaf_pages(bytes(data))[1]
    data[leaf * 4096:(leaf + 1) * 4096] = bytes(4096)
    (damaged / "data.mdb").write_bytes(bytes(data))
    whole = (cut / "data.mdb").read_bytes()
    (cut / "data.mdb").write_bytes(whole[:len(whole) // 2])
    with pytest.raises(DataFileError, match=r"readers.caffe: the LMDB database '<root 0>/damaged' "
                                            r"(is damaged|cannot be read)"):
        Pipeline(caffe([damaged]), data_roots=[tmp_path])
    with pytest.raises(DataFileError, match=r"the LMDB database '<root 0>/cut' is truncated: its "
                                            r"meta page counts [\d,]+ pages of 4,096 bytes"):
        Pipeline(caffe([cut]), data_roots=[tmp_path])
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "data.mdb").write_bytes(b"not lmdb" * 2048)
    with pytest.raises(DataFileError, match=r"the LMDB database '<root 0>/garbage' cannot be "
                                            r"read: MDB_INVALID"):
        Pipeline(caffe([tmp_path / "garbage"]), data_roots=[tmp_path])
    assert labels(caffe([make_caffe(tmp_path / "fine", 3)]), 3) == [0, 1, 2]
