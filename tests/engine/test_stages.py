"""The source-stage contract (reset / next / get_state / advanced), one property for all,
and the file reader's order semantics."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from conveyor.definition.schemas.registry import decode_args, encode_arg
from conveyor.definition.tfrecord import FixedLenFeature, encode_features, int64
from conveyor.errors import CorruptCheckpoint, SpecError
from conveyor.v1 import checkpoint_pb2, pipeline_pb2
from conveyor_server.engine import catalog
from conveyor_server.engine.admission.limits import NO_LIMITS
from conveyor_server.engine.data.files import DataFiles
from conveyor_server.engine.data.roots import DataRoots
from conveyor_server.engine.readers.build import ReaderRequest, build_reader
from conveyor_server.engine.stages import SourceStage
from conveyor_server.engine.stages.external_source import ExternalSourceStage, SourceSample
from conveyor_server.engine.stages.file_reader import FileReaderStage
from conveyor_server.engine.stages.random_ops import RandomStage
from tests.support import external_sources
from tests.support.lmdb_data import make_caffe, make_caffe2
from tests.support.reader_data import make_npy_folder, make_shards
from tests.support.record_data import write_coco, write_tfrecords

B = 4
#: Real files for the readers built from them (filled by the module's fixture).
READER_DATA: dict[str, Path] = {}


@pytest.fixture(scope="module", autouse=True)
def reader_data(tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path_factory.mktemp("readers")
    make_npy_folder(root / "npy", count=15)
    make_shards(root / "wds", [6, 4, 7])
    make_caffe(root / "caffe" / "a", 9)
    make_caffe(root / "caffe" / "b", 8, first=9)
    make_caffe2(root / "caffe2", 15)
    write_tfrecords(root / "tf", [9, 8])
    write_coco(root / "coco", 15)
    READER_DATA["root"] = root


def reader(**kw: object) -> Callable[[], SourceStage]:
    def make() -> SourceStage:
        args: dict = {"batch_size": B, "seed": 7, **kw}
        n = args.pop("n", 15)
        return FileReaderStage(0, n, **args)
    return make


def built(op_type: str, **kw: object) -> Callable[[], SourceStage]:
    """The stage the plan builds for a reader over real files: 15 arrays, 17 samples, 17
    Caffe records in two databases, 15 Caffe2 records, 17 TFRecord records in two files,
    15 COCO images."""
    def make() -> SourceStage:
        root = READER_DATA["root"]
        by_op: dict[str, dict[str, object]] = {
            "readers.numpy": {"file_root": str(root / "npy")},
            "readers.webdataset": {"paths": [str(p) for p in sorted((root / "wds").glob("*.tar"))],
                                   "ext": ["jpg"]},
            "readers.caffe": {"path": [str(root / "caffe" / "a"), str(root / "caffe" / "b")]},
            "readers.caffe2": {"path": str(root / "caffe2")},
            "readers.tfrecord": {
                "path": [str(root / "tf" / f"part-{i}.tfrecord") for i in range(2)],
                "index_path": [str(root / "tf" / f"part-{i}.idx") for i in range(2)],
                "features": encode_features({"label": FixedLenFeature([], int64, 0)})},
            "readers.coco": {"file_root": str(root / "coco" / "images"),
                             "annotations_file": str(root / "coco" / "annotations.json")}}
        data = by_op[op_type]
        op = pipeline_pb2.OpSpec(type=op_type)
        for name, value in {**data, **kw}.items():
            op.args[name].CopyFrom(encode_arg(op_type, name, value))
        catalog.load()
        roots = DataRoots([root])
        return build_reader(ReaderRequest(op_type, 0, decode_args(op), B, 7, roots, NO_LIMITS,
                                          DataFiles(roots, NO_LIMITS))).stage
    return make


def rand(op: str, **kw: object) -> Callable[[], SourceStage]:
    by_op: dict[str, dict[str, object]] = {
        "random.uniform": {"range": (-30.0, 30.0), "values": None},
        "random.normal": {"mean": 0.0, "stddev": 2.0},
        "random.coin_flip": {"probability": 0.3},
        "random.choice": {"a": (2.0, 4.0, 9.0), "p": (0.2, 0.5, 0.3)}}
    defaults = by_op[op]
    args: dict[str, object] = {
        "shape": (), "dtype": "int32" if op == "random.coin_flip" else "float32", "p": None}
    args.update(defaults)
    args.update(kw)
    return lambda: RandomStage(op, 2, args, batch_size=B, seed=12)


def source(name: str) -> Callable[[], SourceStage]:
    """An external source over ``tests/support/external_sources.py``: epochs of varying length."""
    args = {"batch": name != "samples", "batch_info": name == "batches",
            "num_outputs": 2 if name == "samples" else 0, "dtype": None, "ndim": None,
            "layout": None}
    return lambda: ExternalSourceStage(1, f"tests.support.external_sources:{name}",
                                       getattr(external_sources, name), args, batch_size=B)


STAGES = {
    "plain": reader(),
    "shuffle": reader(random_shuffle=True),
    "shuffle_after_epoch": reader(shuffle_after_epoch=True),
    "shards3_id1_rotate": reader(num_shards=3, shard_id=1),
    "shards3_id2_stick": reader(num_shards=3, shard_id=2, stick_to_shard=True),
    "shards3_id0_pad": reader(num_shards=3, shard_id=0, pad_last_batch=True, n=16),
    "shards4_shuffle_pad": reader(num_shards=4, shard_id=3, random_shuffle=True,
                                  pad_last_batch=True, n=17),
    "shards3_sae": reader(num_shards=3, shard_id=1, shuffle_after_epoch=True, n=16),
    "numpy_plain": built("readers.numpy"),
    "numpy_shards3_id1_shuffle": built("readers.numpy", num_shards=3, shard_id=1,
                                       random_shuffle=True),
    "numpy_shards2_sae_pad": built("readers.numpy", num_shards=2, shard_id=1,
                                   shuffle_after_epoch=True, pad_last_batch=True),
    "webdataset_plain": built("readers.webdataset"),
    "webdataset_shards3_id2_stick": built("readers.webdataset", num_shards=3, shard_id=2,
                                          stick_to_shard=True, random_shuffle=True),
    "webdataset_shards4_pad": built("readers.webdataset", num_shards=4, shard_id=3,
                                    pad_last_batch=True),
    "caffe_plain": built("readers.caffe"),
    "caffe_shards3_id1_rotate_shuffle": built("readers.caffe", num_shards=3, shard_id=1,
                                              random_shuffle=True),
    "caffe_shards4_id3_stick_pad": built("readers.caffe", num_shards=4, shard_id=3,
                                         stick_to_shard=True, pad_last_batch=True),
    "caffe2_shards2_id1_pad_shuffle": built("readers.caffe2", num_shards=2, shard_id=1,
                                            pad_last_batch=True, random_shuffle=True),
    "tfrecord_plain": built("readers.tfrecord"),
    "tfrecord_shards3_id1_shuffle_pad": built("readers.tfrecord", num_shards=3, shard_id=1,
                                              random_shuffle=True, pad_last_batch=True),
    "coco_shards2_id1_sae": built("readers.coco", num_shards=2, shard_id=1,
                                  shuffle_after_epoch=True),
    "coco_shards4_stick_shuffle": built("readers.coco", num_shards=4, shard_id=2,
                                        stick_to_shard=True, random_shuffle=True),
    "uniform": rand("random.uniform"),
    "uniform_values_shape": rand("random.uniform", values=(1.0, 2.0, 5.0), shape=(2, 3)),
    "normal": rand("random.normal"),
    "coin_flip": rand("random.coin_flip"),
    "choice": rand("random.choice"),
    "choice_n_shape": rand("random.choice", a=(6.0,), p=None, shape=(3,)),
    "external_source_samples": source("samples"),
    "external_source_batch_info": source("batches"),
    "external_source_iterations": source("iterations"),
}


def _arrays(value: object) -> list[np.ndarray]:
    if isinstance(value, SourceSample):  # an external source's sample: its outputs
        return [np.asarray(v) for v in value.get()]
    return [np.asarray(value)]


def values_equal(a: list, b: list) -> bool:
    return all(len(xs) == len(ys) and all(np.array_equal(x, y) and x.dtype == y.dtype
                                          for x, y in zip(xs, ys, strict=True))
               for xs, ys in zip(map(_arrays, a), map(_arrays, b), strict=True))


@pytest.mark.parametrize("name", sorted(STAGES))
@pytest.mark.parametrize("steps", [0, 1, 3, 4, 11, 29])
def test_stage_save_restore(name: str, steps: int) -> None:
    make = STAGES[name]
    first = make()
    first.reset(None)
    start = first.get_state()
    for _ in range(steps):
        first.next()
    state = first.get_state()
    assert state == first.advanced(start, steps * B), "advanced() disagrees with stepping"
    expected = [first.next() for _ in range(6)]
    second = make()
    second.reset(state)
    assert second.get_state() == state
    got = [second.next() for _ in range(6)]
    assert all(values_equal(x, y) for x, y in zip(expected, got, strict=True))


def epochs(stage: FileReaderStage, count: int) -> list[list[int]]:
    return [stage.order(e).tolist() for e in range(count)]


def test_unshuffled_order_shards_and_rotation() -> None:
    # 10 files, 3 shards: [0,3) [3,6) [6,10), as DALI's start index N*k//S.
    rotating = FileReaderStage(0, 10, batch_size=2, seed=1, num_shards=3, shard_id=1)
    assert epochs(rotating, 4) == [[3, 4, 5], [6, 7, 8, 9], [0, 1, 2], [3, 4, 5]]
    sticky = FileReaderStage(0, 10, batch_size=2, seed=1, num_shards=3, shard_id=1,
                             stick_to_shard=True)
    assert epochs(sticky, 2) == [[3, 4, 5], [3, 4, 5]]


def test_batches_straddle_epochs_unless_padded() -> None:
    plain = FileReaderStage(0, 5, batch_size=3, seed=1)
    assert [plain.next() for _ in range(3)] == [[0, 1, 2], [3, 4, 0], [1, 2, 3]]
    padded = FileReaderStage(0, 5, batch_size=3, seed=1, pad_last_batch=True)
    assert [padded.next() for _ in range(3)] == [[0, 1, 2], [3, 4, 4], [0, 1, 2]]


def test_padding_keeps_shards_in_lockstep() -> None:
    # 10 files in 3 shards of 3, 3, 4: every shard's epoch is padded to 4 (batch 2).
    lengths = {FileReaderStage(0, 10, batch_size=2, seed=1, num_shards=3, shard_id=s,
                               pad_last_batch=True).epoch_length(0) for s in range(3)}
    assert lengths == {4}
    first = FileReaderStage(0, 10, batch_size=2, seed=1, num_shards=3, shard_id=0,
                            pad_last_batch=True, stick_to_shard=True)
    assert first.order(0).tolist() == [0, 1, 2, 2]


@pytest.mark.parametrize("shuffle", ["none", "random_shuffle", "shuffle_after_epoch"])
@pytest.mark.parametrize("stick", [False, True])
def test_shards_partition_each_epoch(shuffle: str, stick: bool) -> None:
    n, shards = 23, 3
    readers = [FileReaderStage(0, n, batch_size=4, seed=5, num_shards=shards, shard_id=s,
                               stick_to_shard=stick,
                               random_shuffle=shuffle == "random_shuffle",
                               shuffle_after_epoch=shuffle == "shuffle_after_epoch")
               for s in range(shards)]
    for epoch in range(5):
        seen = sorted(i for r in readers for i in r.order(epoch).tolist())
        assert seen == list(range(n)), f"epoch {epoch}: shards do not partition the data"


def test_random_shuffle_is_a_fresh_permutation_each_epoch() -> None:
    stage = FileReaderStage(0, 50, batch_size=4, seed=3, random_shuffle=True)
    orders = epochs(stage, 3)
    for order in orders:
        assert sorted(order) == list(range(50))
    assert orders[0] != orders[1] != orders[2]
    other_seed = FileReaderStage(0, 50, batch_size=4, seed=4, random_shuffle=True)
    assert other_seed.order(0).tolist() != orders[0]


def test_shuffle_after_epoch_starts_unshuffled_and_ignores_the_pipeline_seed() -> None:
    a = FileReaderStage(0, 30, batch_size=4, seed=1, shuffle_after_epoch=True)
    b = FileReaderStage(0, 30, batch_size=4, seed=2, shuffle_after_epoch=True)
    assert a.order(0).tolist() == list(range(30))
    assert a.order(1).tolist() == b.order(1).tolist() != list(range(30))


def test_random_draws_do_not_depend_on_batching() -> None:
    make = STAGES["uniform"]
    stage = make()
    stage.reset(None)
    batched = np.concatenate([np.stack(stage.next()) for _ in range(3)])
    assert isinstance(stage, RandomStage)
    assert np.array_equal(batched, stage.draw(0, 3 * B))
    assert np.all((batched >= -30) & (batched < 30)) and batched.dtype == np.float32


def test_reader_refuses_bad_settings_and_states() -> None:
    with pytest.raises(SpecError, match="shard_id"):
        FileReaderStage(0, 10, batch_size=2, seed=1, num_shards=2, shard_id=2)
    with pytest.raises(SpecError, match="num_shards"):
        FileReaderStage(0, 2, batch_size=2, seed=1, num_shards=3)
    stage = FileReaderStage(0, 10, batch_size=2, seed=1)
    bad = checkpoint_pb2.OpState(op=0, reader=checkpoint_pb2.ReaderState(epoch=0, position=10))
    with pytest.raises(CorruptCheckpoint, match="beyond"):
        stage.reset(bad)
    with pytest.raises(CorruptCheckpoint, match="random state"):
        stage.reset(checkpoint_pb2.OpState(op=0, random=checkpoint_pb2.RandomState()))
