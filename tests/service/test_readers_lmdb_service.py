"""The Caffe and Caffe2 readers served: a pipeline over real LMDBs, checkpointed on one
server and restored on another, byte for byte; a corrupt record is DATA_LOSS and a changed
database DATA_CHANGED over the wire, named below the data root."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor import errors, fn, pipeline_def, types
from conveyor_server import Pipeline
from tests.support.lmdb_data import change_lmdb, datum, key, make_caffe, make_caffe2
from tests.support.resume import assert_same_stream, run_batches
from tests.support.servers import Start, client


@pipeline_def(batch_size=3, num_threads=2, seed=17, enable_checkpointing=True)
def both_lmdb_readers(root: str) -> Any:
    jpegs, labels = fn.readers.caffe(path=[f"{root}/caffe_a", f"{root}/caffe_b"],
                                     num_shards=2, shard_id=1, random_shuffle=True,
                                     name="caffe")
    angles = fn.random.uniform(range=(-15.0, 15.0))
    images = fn.rotate(fn.decoders.image(jpegs, output_type=types.RGB), angle=angles,
                       fill_value=0)
    jpegs2, multi = fn.readers.caffe2(path=f"{root}/caffe2", label_type=1, num_labels=7,
                                      pad_last_batch=True, name="caffe2")
    return images, labels, fn.decoders.image(jpegs2, output_type=types.RGB), multi, angles


def make_data(root: Path) -> None:
    make_caffe(root / "caffe_a", 7)
    make_caffe(root / "caffe_b", 6, first=7)
    make_caffe2(root / "caffe2", 8, label_type=1)


def test_a_pipeline_over_both_lmdb_readers_restores_exactly_on_another_server(
        start_server: Start, tmp_path: Path) -> None:
    root = tmp_path / "root"
    make_data(root)
    a, b = start_server(roots=[root]), start_server(roots=[root])
    spec = both_lmdb_readers(str(root))
    with client(a) as ca, client(b) as cb:
        pipe = ca.create("lmdb", spec)
        first = run_batches(pipe, 4)  # type: ignore[arg-type]
        saved = pipe.checkpoint()
        expected = run_batches(pipe, 7)  # type: ignore[arg-type]  # past the shard rotation
        restored = cb.restore("lmdb", checkpoint=saved.id)
        got = run_batches(restored, 7)  # type: ignore[arg-type]
    assert_same_stream(expected, got, "restored on server B")
    images, labels, images2, multi, _ = got[0]
    assert images2.dtype == np.uint8 and images2.layout() == "HWC"
    assert images.dtype == np.uint8 and images.layout() == "HWC"
    assert labels.dtype == np.int32 and multi.dtype == np.int32
    assert all(m.shape == (7,) for m in multi)
    # The shard rotates: records of shard 1 ([6, 13)) first, then of shard 0 ([0, 6)).
    classes = [int(c[0]) for batch in first + expected for c in batch[1]]
    assert set(classes[:7]) == set(range(6, 13)) and set(classes[7:13]) == set(range(6))
    with Pipeline(spec, data_roots=[root]) as local:
        assert_same_stream(run_batches(local, 11), first + expected, "in process")


def test_corrupt_records_and_changed_databases_over_the_wire(
        start_server: Start, tmp_path: Path) -> None:
    root = tmp_path / "root"
    make_data(root)
    a, b = start_server(roots=[root]), start_server(roots=[root])
    spec = both_lmdb_readers(str(root))
    with client(a) as ca, client(b) as cb:
        pipe = ca.create("edited", spec)
        pipe.run()
        saved = pipe.checkpoint()
        change_lmdb(root / "caffe_b", put={key(20): datum(20)})  # one record more
        with pytest.raises(errors.DataChanged,
                           match=r"reader 'caffe' \(op 0\): the data set changed: .*first "
                                 r"change: database 1 '<root 0>/caffe_b/data.mdb' changed "
                                 r"\(.*keys\)") \
                as refused:
            cb.restore("edited", checkpoint=saved.id)
        assert str(root) not in str(refused.value)

        @pipeline_def(batch_size=2, seed=1)
        def records() -> Any:
            return fn.readers.caffe(path=str(root / "broken"))

        make_caffe(root / "broken", 3)
        change_lmdb(root / "broken", put={key(1): b"\x08\x96\x01 torn"})
        broken = ca.create("broken", records())
        with pytest.raises(errors.DataLoss, match=r"record '<root 0>/broken' at key "
                                                  r"'00000001_img1.jpg' is not a Caffe Datum"):
            broken.run()
