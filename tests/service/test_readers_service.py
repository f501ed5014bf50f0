"""The numpy and webdataset readers served: a pipeline over real ``.npy`` files and real tar
shards, checkpointed on one server and restored on another, byte for byte; refusals over
the wire name files below their data root."""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor import errors, fn, pipeline_def, types
from conveyor_server import Pipeline
from tests.support.reader_data import add_member, jpeg_members, make_npy_folder, make_shards
from tests.support.resume import assert_same_stream, batch_bytes, run_batches
from tests.support.servers import Start, client


@pipeline_def(batch_size=3, num_threads=2, seed=31, enable_checkpointing=True)
def both_readers(root: str) -> Any:
    shards = [f"{root}/wds/shard-{s:04d}.tar" for s in range(3)]
    jpegs, labels = fn.readers.webdataset(paths=shards, ext=["jpg", "cls"],
                                          dtypes=[types.UINT8, types.INT32],
                                          random_shuffle=True, name="shards")
    images = fn.decoders.image(jpegs, output_type=types.RGB)
    angles = fn.random.uniform(range=(-15.0, 15.0))
    images = fn.rotate(images, angle=angles, fill_value=0)
    arrays = fn.readers.numpy(file_root=f"{root}/npy", shuffle_after_epoch=True, name="arrays")
    return images, labels, arrays, angles


def make_data(root: Path) -> None:
    make_npy_folder(root / "npy", count=8)
    make_shards(root / "wds", [4, 3, 5], jpeg=True)


def test_a_pipeline_over_both_readers_restores_exactly_on_another_server(
        start_server: Start, tmp_path: Path) -> None:
    root = tmp_path / "root"
    make_data(root)
    a, b = start_server(roots=[root]), start_server(roots=[root])
    spec = both_readers(str(root))
    with client(a) as ca, client(b) as cb:
        pipe = ca.create("readers", spec)
        first = run_batches(pipe, 5)  # type: ignore[arg-type]
        saved = pipe.checkpoint()
        expected = run_batches(pipe, 6)  # type: ignore[arg-type]
        restored = cb.restore("readers", checkpoint=saved.id)
        got = run_batches(restored, 6)  # type: ignore[arg-type]
    assert_same_stream(expected, got, "restored on server B")
    images, labels, arrays, _ = got[0]
    assert images.dtype == np.uint8 and images.layout() == "HWC"
    assert labels.dtype == np.int32 and arrays.dtype == np.float32
    # The served stream is the in-process stream.
    with Pipeline(spec, data_roots=[root]) as local:
        assert_same_stream(run_batches(local, 11), first + expected, "in process")


def test_a_restore_over_a_changed_shard_is_refused_naming_it(
        start_server: Start, tmp_path: Path) -> None:
    root = tmp_path / "root"
    make_data(root)
    a, b = start_server(roots=[root]), start_server(roots=[root])
    spec = both_readers(str(root))
    with client(a) as ca, client(b) as cb:
        pipe = ca.create("edited", spec)
        pipe.run()
        saved = pipe.checkpoint()
        with tarfile.open(root / "wds" / "shard-0001.tar", "w") as archive:
            for n in range(4, 6):  # one sample fewer
                for name, data in jpeg_members(f"s1/{n:05d}", n):
                    add_member(archive, name, data)
        with pytest.raises(errors.DataChanged,
                           match=r"reader 'shards' \(op 0\): the data set changed: .*first "
                                 r"change: shard 1 '<root 0>/wds/shard-0001.tar' changed "
                                 r"\(.*member index\)") \
                as refused:
            cb.restore("edited", checkpoint=saved.id)
    assert str(root) not in str(refused.value)


def test_bad_readers_are_refused_over_the_wire_without_revealing_the_root(
        start_server: Start, tmp_path: Path) -> None:
    root = tmp_path / "root"
    make_data(root)
    server = start_server(roots=[root])
    outside = make_shards(tmp_path / "elsewhere", [2])[0]

    @pipeline_def(batch_size=2, seed=1)
    def shards(*paths: str) -> Any:
        return fn.readers.webdataset(paths=list(paths), ext="jpg")

    with client(server) as c:
        with pytest.raises(errors.DataLoss,
                           match=r"cannot read shard '<root 0>/wds/gone.tar'") as gone:
            c.create("gone", shards(str(root / "wds" / "shard-0000.tar"),
                                    str(root / "wds" / "gone.tar")))
        with pytest.raises(errors.PermissionDenied, match="outside the data roots"):
            c.create("outside", shards(str(outside)))
        (root / "wds" / "junk.tar").write_bytes(b"\1" * 3000)
        with pytest.raises(errors.DataLoss, match=r"shard '<root 0>/wds/junk.tar' is not a "
                                                  r"readable tar archive"):
            c.create("junk", shards(str(root / "wds" / "junk.tar")))
        pipe = c.create("fine", shards(str(root / "wds" / "shard-0002.tar")))
        assert batch_bytes(pipe.run()) != []
    assert str(root) not in str(gone.value)
