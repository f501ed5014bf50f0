"""``fn.readers.tfrecord``: records and features as DALI's reader gives them, the framing
checked before a record is parsed (CRC-32C against known values and TensorFlow), index
files and the tool that writes them, bounds, and errors that name the record."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor import fn, pipeline_def
from conveyor.cli import main as cli_main
from conveyor.dali import tfrecord as dali_tfrec
from conveyor.definition import tfrecord as tfrec
from conveyor.definition.crc32c import crc32c
from conveyor.definition.spec import as_spec
from conveyor.errors import DataChanged, DataFileError, ResourceExhausted, SpecError
from conveyor_server import Pipeline
from conveyor_server.engine.admission.limits import EngineLimits
from conveyor_server.engine.data.listings import MemoryListings
from tests.support import record_data
from tests.support.resume import run_batches

FEATURES = {
    "image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
    "image/class/label": tfrec.FixedLenFeature([], tfrec.int64, -1),
    "pair": tfrec.FixedLenFeature([2], tfrec.int64, 0),
    "boxes": tfrec.VarLenFeature([2], tfrec.float32, 0.0),
    "text": tfrec.FixedLenFeature([1], tfrec.string, "none"),
    "absent": tfrec.FixedLenFeature([2, 2], tfrec.float32, 1.5),
    "absent_var": tfrec.VarLenFeature(tfrec.int64, 0),
}


@pipeline_def(batch_size=3, seed=4, enable_checkpointing=True)
def records(paths: list[str], indexes: list[str], features: Any = None, **reader: Any) -> Any:
    out = fn.readers.tfrecord(path=paths, index_path=indexes, features=features or FEATURES,
                              name="tf", **reader)
    return tuple(out.values())


def read_all(spec: Any, batches: int, **kw: Any) -> list[list[np.ndarray]]:
    """Every sample of ``batches`` batches, as its outputs."""
    with Pipeline(spec, **kw) as pipe:
        return [[np.asarray(out[s]) for out in batch]
                for batch in run_batches(pipe, batches) for s in range(len(batch[0]))]


# -- CRC-32C ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "crc"), [
    (b"123456789", 0xE3069283),          # the check value of CRC-32C
    (bytes(32), 0x8A9136AA),             # RFC 3720, B.4
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
    (b"", 0),
])
def test_crc32c_gives_the_published_check_values(data: bytes, crc: int) -> None:
    assert crc32c(data) == crc


def test_crc32c_of_long_data_equals_the_byte_at_a_time_definition() -> None:
    rng = random.Random(7)
    for size in (4095, 4096, 4097, 10_000, 65_536, 100_003, 1 << 20):
        data = rng.randbytes(size)
        assert crc32c(data) == record_data.crc32c(data), size
        assert crc32c(memoryview(data)[1:]) == record_data.crc32c(data[1:]), size


def test_framing_matches_tensorflows_writer_and_its_records_parse(tmp_path: Path) -> None:
    if os.environ.get("CONVEYOR_SKIP_TENSORFLOW_TESTS") == "1":
        pytest.skip("CONVEYOR_SKIP_TENSORFLOW_TESTS=1: TensorFlow's framing is NOT compared")
    import tensorflow as tf  # part of the test environment: missing, this test fails
    path = tmp_path / "tf.tfrecord"
    examples = []
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(5):
            feature = {
                "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(
                    value=[os.urandom(100 * i + 5000 * (i == 4))])),
                "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(
                    value=[i - 2])),
                "pair": tf.train.Feature(int64_list=tf.train.Int64List(value=[i, -(1 << 50)])),
                "boxes": tf.train.Feature(float_list=tf.train.FloatList(
                    value=[0.5 * k for k in range(2 * i)]))}
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            examples.append(example)
            writer.write(example.SerializeToString())
    # Our framing of the same messages is TensorFlow's, byte for byte.
    assert path.read_bytes() == b"".join(record_data.frame(e.SerializeToString())
                                         for e in examples)
    index = tmp_path / "tf.idx"
    assert tfrec.write_index(str(path), str(index)) == 5
    got = read_all(records([str(path)], [str(index)]), 2)[:5]
    for i, (sample, example) in enumerate(zip(got, examples, strict=True)):
        feature = example.features.feature
        assert sample[0].tobytes() == feature["image/encoded"].bytes_list.value[0]
        assert sample[1].shape == () and int(sample[1]) == i - 2
        assert sample[2].tolist() == [i, -(1 << 50)]
        assert sample[3].shape == (i, 2)
        assert sample[3].ravel().tolist() == list(feature["boxes"].float_list.value)


# -- features ---------------------------------------------------------------------------------


def test_features_give_dalis_shapes_and_types_and_defaults(tmp_path: Path) -> None:
    paths, indexes = record_data.write_tfrecords(tmp_path, [4, 3])
    got = read_all(records(paths, indexes), 3)[:7]
    for i, sample in enumerate(got):
        raw = record_data.tfrecord_sample(i)
        encoded, label, pair, boxes, text, absent, absent_var = sample
        assert encoded.dtype == np.uint8 and encoded.tobytes() == raw["image/encoded"][0][0]
        assert label.dtype == np.int64 and label.shape == () and label == (i * 7) % 5 - 1
        assert pair.dtype == np.int64 and pair.tolist() == [i, -i * 1000003]
        assert boxes.dtype == np.float32 and boxes.shape == ((i % 4), 2)
        # A record without the feature: the default (FixedLen), nothing (VarLen).
        assert text.tobytes() == (b"odd %d" % i if i % 2 else b"none")
        assert absent.dtype == np.float32 and absent.tolist() == [[1.5, 1.5], [1.5, 1.5]]
        assert absent_var.dtype == np.int64 and absent_var.shape == (0,)


def test_dali_spelling_is_the_same_module() -> None:
    assert dali_tfrec.FixedLenFeature is tfrec.FixedLenFeature
    assert (dali_tfrec.int64, dali_tfrec.float32, dali_tfrec.string) == \
        (tfrec.int64, tfrec.float32, tfrec.string)
    feature = dali_tfrec.VarLenFeature([3], dali_tfrec.float32, 0.0)
    assert tfrec.decode_feature(feature.encode("x")) == ("x", feature)


@pytest.mark.parametrize(("make", "message"), [
    (lambda: tfrec.VarLenFeature(tfrec.string, ""), "a string feature must be a "
                                                   "FixedLenFeature"),
    (lambda: tfrec.FixedLenFeature([2], "int32", 0), "dtype 'int32' is not one of"),
    (lambda: tfrec.FixedLenFeature([-1], tfrec.int64, 0), "must be at most 8 non-negative"),
    (lambda: tfrec.FixedLenFeature([1 << 13, 1 << 13], tfrec.int64, 0), "above 16,777,216"),
    (lambda: tfrec.FixedLenFeature([], tfrec.int64, 0.5), "is not an int64"),
    (lambda: tfrec.FixedLenFeature([], tfrec.float32, "x"), "must be a number"),
    (lambda: tfrec.VarLenFeature(tfrec.int64), "takes \\(dtype, default_value\\)"),
])
def test_malformed_features_are_refused_naming_the_argument(make: Any, message: str) -> None:
    with pytest.raises(SpecError, match=message) as refused:
        make()
    assert refused.value.argument == "features"


def test_a_spec_with_a_forged_feature_is_refused(tmp_path: Path) -> None:
    paths, indexes = record_data.write_tfrecords(tmp_path, [2])
    spec = as_spec(records(paths, indexes, {"x": tfrec.FixedLenFeature([2], tfrec.int64, 0)}))
    op = spec.ops[0]
    del op.args["features"].strings.values[:]
    op.args["features"].strings.values.extend(['{"name": "x", "kind": "fixed", "shape": [2], '
                                               '"dtype": "int64", "default": "oops"}'])
    with pytest.raises(SpecError, match=r"feature 'x': the default of a int64 feature must "
                                        r"be a number"):
        Pipeline(spec)


# -- framing, indexes and bounds --------------------------------------------------------------


def test_index_tools_write_dalis_format_and_only_missing_files(tmp_path: Path,
                                                                capsys: Any) -> None:
    paths, indexes = record_data.write_tfrecords(tmp_path, [5, 2])
    expected = [Path(i).read_text() for i in indexes]
    assert tfrec.build_missing_indexes(paths) == [f"{p}.idx" for p in paths]
    assert [Path(f"{p}.idx").read_text() for p in paths] == expected
    assert tfrec.build_missing_indexes(paths) == []  # they exist now
    out = tmp_path / "out"
    out.mkdir()
    assert cli_main(["tfrecord-index", *paths, "--index-dir", str(out)]) == 0
    assert (out / "part-0.tfrecord.idx").read_text() == expected[0]
    assert "5 records" in capsys.readouterr().out
    damaged = bytearray(Path(paths[0]).read_bytes())
    damaged[40] ^= 1
    Path(paths[0]).write_bytes(bytes(damaged))
    with pytest.raises(tfrec.RecordFramingError, match="the record at byte 0: its data's "
                                                       "checksum does not match"):
        tfrec.write_index(paths[0], str(tmp_path / "x.idx"))
    assert not (tmp_path / "x.idx").exists() and not (tmp_path / "x.idx.partial").exists()
    assert cli_main(["tfrecord-index", paths[0], "--force"]) == 1


def test_a_damaged_record_is_data_loss_naming_it_or_skipped(tmp_path: Path) -> None:
    paths, indexes = record_data.write_tfrecords(tmp_path, [3])
    lines = Path(indexes[0]).read_text().split()
    second = int(lines[2])
    blob = bytearray(Path(paths[0]).read_bytes())
    blob[second + 14] ^= 0x40  # a byte of the second record's data
    Path(paths[0]).write_bytes(bytes(blob))
    with Pipeline(records(paths, indexes, batch_size=1), data_roots=[tmp_path]) as pipe:
        pipe.run()
        with pytest.raises(DataFileError, match=rf"record <root 0>/part-0.tfrecord@{second} "
                                                r"fails its data checksum"):
            pipe.run()
    skipped = read_all(records(paths, indexes, batch_size=3, on_error="skip"), 1)
    assert [s[1].item() for s in skipped] == [-1, 3]


def test_a_record_whose_length_disagrees_with_its_index_is_refused(tmp_path: Path) -> None:
    paths, indexes = record_data.write_tfrecords(tmp_path, [2])
    blob = Path(paths[0]).read_bytes()
    size = int(Path(indexes[0]).read_text().split()[1])
    # The index claims the two records are one: the first's header says otherwise.
    Path(indexes[0]).write_text(f"0 {len(blob)}\n")
    with Pipeline(records(paths, indexes, batch_size=1)) as pipe, \
            pytest.raises(DataFileError, match=rf"declares {size - 16:,} bytes of data, its "
                                               rf"index entry {len(blob) - 16:,}"):
        pipe.run()
    # A header whose checksum does not match: not a TFRecord file.
    Path(paths[0]).write_bytes(b"x" * len(blob))
    Path(indexes[0]).write_text(f"0 {size}\n")
    with Pipeline(records(paths, indexes, batch_size=1)) as pipe, \
            pytest.raises(DataFileError, match="its length's checksum does not match"):
        pipe.run()


@pytest.mark.parametrize(("index", "message"), [
    ("0 10\n", "line 1: a record of 10 bytes is shorter than its framing"),
    ("0 abc\n", "line 1: expected 'offset size'"),
    ("", "lists no record"),
    ("0 20\n999999 20\n", "line 2: the record ends at byte 1,000,019, beyond the file's"),
])
def test_bad_index_files_are_refused_naming_the_line(tmp_path: Path, index: str,
                                                      message: str) -> None:
    paths, indexes = record_data.write_tfrecords(tmp_path, [2])
    Path(indexes[0]).write_text(index)
    with pytest.raises(DataFileError, match=r"index file '.*part-0.idx' of '.*part-0.tfrecord': "
                                            + message):
        Pipeline(records(paths, indexes))


def test_records_above_the_file_limit_are_refused_before_they_are_read(tmp_path: Path) -> None:
    paths, indexes = record_data.write_tfrecords(tmp_path, [2])
    with Pipeline(records(paths, indexes, batch_size=1),
                  limits=EngineLimits(max_file_bytes=20)) as pipe, \
            pytest.raises(ResourceExhausted, match=r"record '.*part-0.tfrecord@0' holds \d+ "
                                                   r"bytes, above the server's limit "
                                                   r"limits.max_file_bytes = 20"):
        pipe.run()


def test_a_feature_of_another_type_or_count_is_data_loss(tmp_path: Path) -> None:
    paths, indexes = record_data.write_tfrecords(tmp_path, [2])
    wrong_type = {"pair": tfrec.FixedLenFeature([2], tfrec.float32, 0.0)}
    with Pipeline(records(paths, indexes, wrong_type)) as pipe, \
            pytest.raises(DataFileError, match=r"holds feature 'pair' as a int64_list, "
                                               r"declared float32"):
        pipe.run()
    wrong_count = {"pair": tfrec.FixedLenFeature([3], tfrec.int64, 0)}
    with Pipeline(records(paths, indexes, wrong_count)) as pipe, \
            pytest.raises(DataFileError, match=r"holds 2 values of feature 'pair', its "
                                               r"FixedLenFeature shape \[3\] holds 3"):
        pipe.run()


def test_a_restore_over_moved_records_is_refused_naming_the_file(tmp_path: Path) -> None:
    paths, indexes = record_data.write_tfrecords(tmp_path / "data", [4, 4])
    spec = records(paths, indexes, random_shuffle=True)
    listings = MemoryListings()
    with Pipeline(spec, data_roots=[tmp_path], listings=listings) as pipe:
        run_batches(pipe, 2)
        blob = pipe.checkpoint()
    # The same records in another order: same size, another index.
    first = record_data.write_tfrecords(tmp_path / "other", [4, 4])
    data = Path(first[0][1]).read_bytes()
    spans = [tuple(map(int, line.split())) for line in Path(first[1][1]).read_text().splitlines()]
    reordered = b"".join(data[o:o + s] for o, s in reversed(spans))
    Path(paths[1]).write_bytes(reordered)
    stamp = os.stat(paths[1])
    offset = 0
    lines = []
    for _, s in reversed(spans):
        lines.append(f"{offset} {s}\n")
        offset += s
    Path(indexes[1]).write_text("".join(lines))
    os.utime(paths[1], ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    with pytest.raises(DataChanged, match=r"first change: TFRecord file 1 "
                                          r"'<root 0>/data/part-1.tfrecord' changed "
                                          r"\(.*record index\)"):
        Pipeline(spec, checkpoint=blob, data_roots=[tmp_path], listings=listings)
