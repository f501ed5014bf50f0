"""``fn.readers.webdataset``: DALI's samples, order, sharding and extension rules over real
tar shards, index files, reads by seek, and errors that name the shard below its root."""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor import fn, pipeline_def, types
from conveyor.errors import (
    DataChanged,
    DataFileError,
    PermissionDenied,
    ResourceExhausted,
    SpecError,
)
from conveyor_server import Pipeline
from conveyor_server.engine.admission.limits import EngineLimits
from conveyor_server.engine.data.listings import MemoryListings
from tests.support.reader_data import add_member, make_shards, sample_members, write_index
from tests.support.resume import batch_bytes, run_batches


@pipeline_def(batch_size=2, seed=4, enable_checkpointing=True)
def wds(shards: list[Path], **reader: Any) -> Any:
    reader.setdefault("ext", ["jpg", "cls"])
    return fn.readers.webdataset(paths=[str(p) for p in shards], name="wds", **reader)


def classes(spec: Any, batches: int, **kw: Any) -> list[int]:
    """The class (the global sample number) of every sample of ``batches`` batches."""
    with Pipeline(spec, **kw) as pipe:
        return [int(c[0]) for batch in run_batches(pipe, batches) for c in batch[1]]


def test_samples_come_in_shard_and_member_order_with_their_bytes(tmp_path: Path) -> None:
    shards = make_shards(tmp_path / "wds", [3, 4, 2])
    spec = wds(shards, dtypes=[types.UINT8, types.INT32])
    with Pipeline(spec) as pipe:
        assert pipe.epoch_size() == 9
        batches = run_batches(pipe, 5)  # 10 samples: the epoch, then sample 0 again
    images = [a for b in batches for a in b[0]]
    labels = [c for b in batches for c in b[1]]
    for n, (image, label) in enumerate(zip(images, labels, strict=True)):
        (_, payload), (_, cls) = sample_members("", n % 9)
        assert image.dtype == np.uint8 and image.tobytes() == payload
        assert label.dtype == np.int32 and label.shape == (1,) and label.tobytes() == cls


def _odd_shard(path: Path) -> None:
    """Folders, links, hidden files, multi-dot and upper-case extensions, a key that comes
    back after another, a member without extension."""
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as archive:
        for name, kind in (("d", tarfile.DIRTYPE), ("d/x.jpg", tarfile.SYMTYPE)):
            entry = tarfile.TarInfo(name)
            entry.type = kind
            archive.addfile(entry)
        for name, data in (("d/a.jpg", b"A1"), ("d/a.seg.png", b"A2"), ("d/.hidden", b"H"),
                           ("d/b.JPEG", b"B1"), ("d/b.txt", b"B2"), ("c.seg.png", b"C2"),
                           ("d/a.jpg", b"A3"), ("noext", b"N")):
            add_member(archive, name, data)


def _rows(spec: Any, count: int) -> list[tuple[bytes, ...]]:
    with Pipeline(spec) as pipe:
        return [tuple(out[i].tobytes() for out in batch)
                for batch in run_batches(pipe, count) for i in range(len(batch[0]))]


def test_extension_rules_and_missing_components_as_dali(tmp_path: Path) -> None:
    shard = tmp_path / "odd.tar"
    _odd_shard(shard)
    ext = ["jpg;jpeg", "seg.png"]

    @pipeline_def(batch_size=1, seed=4)
    def odd(**reader: Any) -> Any:
        return fn.readers.webdataset(paths=str(shard), ext=ext, **reader)

    # Samples: d/a (jpg, seg.png), d/b (JPEG, txt), c (seg.png), d/a again (jpg), noext.
    assert _rows(odd(), 5) == [(b"A1", b"A2"), (b"", b""), (b"", b"C2"), (b"A3", b""),
                               (b"", b"")]
    assert _rows(odd(case_sensitive_extensions=False), 2) == [(b"A1", b"A2"), (b"B1", b"")]
    assert _rows(odd(missing_component_behavior="skip"), 2) == [(b"A1", b"A2")] * 2
    with pytest.raises(DataFileError, match=r"shard '.*odd.tar': sample 'd/b' has no member "
                                            r"for output 0 \(ext 'jpeg;jpg'\) and "
                                            r"missing_component_behavior is 'error'"):
        Pipeline(odd(missing_component_behavior="error"))
    with Pipeline(odd()) as pipe:
        pipe.run()
        empty, _ = pipe.run()  # d/b: no member for either output
        assert empty[0].shape == (0,) and empty.dtype == np.uint8


def test_sharding_splits_the_global_sample_sequence(tmp_path: Path) -> None:
    shards = make_shards(tmp_path / "wds", [5, 6])  # 11 samples, numbered 0..10
    bounds = [k * 11 // 3 for k in range(4)]  # DALI: shard k starts at k*N//S

    def shard(k: int) -> list[int]:
        return list(range(bounds[k % 3], bounds[k % 3 + 1]))

    for k in range(3):
        rotating = shard(k) + shard(k + 1) + shard(k + 2)  # shards rotate per epoch
        assert classes(wds(shards, num_shards=3, shard_id=k, batch_size=1),
                       len(rotating)) == rotating
        assert classes(wds(shards, num_shards=3, shard_id=k, batch_size=1, stick_to_shard=True),
                       2 * len(shard(k))) == shard(k) * 2
    shuffled = classes(wds(shards, random_shuffle=True, batch_size=1), 11)
    assert sorted(shuffled) == list(range(11)) and shuffled != list(range(11))


def test_index_files_give_the_same_stream_as_indexing_the_tar(tmp_path: Path) -> None:
    shards = make_shards(tmp_path / "wds", [4, 3])
    indexes = [p.with_suffix(".idx") for p in shards]
    for shard, index in zip(shards, indexes, strict=True):
        write_index(shard, index)
    plain = wds(shards, random_shuffle=True)
    indexed = wds(shards, random_shuffle=True, index_paths=[str(i) for i in indexes])
    with Pipeline(plain) as a, Pipeline(indexed) as b:
        assert [batch_bytes(x) for x in run_batches(a, 6)] == \
            [batch_bytes(x) for x in run_batches(b, 6)]
    lines = indexes[1].read_text().splitlines()
    for bad, reason in ((["v9.9 3", *lines[1:]], r"line 1: expected '<version> <samples>'"),
                        ([lines[0].replace(" 3", " 4"), *lines[1:]],
                         r"line 1: declares 4 samples, the file lists 3"),
                        ([lines[0], lines[1].replace(" 1536 ", " 1537 "), *lines[2:]],
                         r"line 2: offset 1537 is not a multiple of the tar block size"),
                        ([lines[0], lines[1].replace(" 1536 ", " 99840 "), *lines[2:]],
                         r"line 2: member data ends at byte [\d,]+, beyond the shard's")):
        indexes[1].write_text("\n".join(bad) + "\n")
        with pytest.raises(DataFileError, match=r"index file '<root 0>/wds/shard-0001.idx' of "
                                                r"shard '<root 0>/wds/shard-0001.tar': " + reason):
            Pipeline(indexed, data_roots=[tmp_path])
    with pytest.raises(SpecError, match=r"index_paths': has 1 entries for 2 paths"):
        Pipeline(wds(shards, index_paths=[str(indexes[0])]))


def test_members_are_read_by_seek_without_walking_the_archive(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shards = make_shards(tmp_path / "wds", [3, 3])
    expected = classes(wds(shards, random_shuffle=True), 4)
    with Pipeline(wds(shards, random_shuffle=True)) as pipe:
        def no_tar(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("the archive was walked at run time")
        monkeypatch.setattr(tarfile, "open", no_tar)
        assert [int(c[0]) for b in run_batches(pipe, 4) for c in b[1]] == expected


def test_broken_shards_are_refused_naming_them_below_their_root(tmp_path: Path) -> None:
    root = tmp_path / "data"
    shards = make_shards(root / "wds", [3, 3])
    roots = [root]
    garbage = root / "wds" / "garbage.tar"
    garbage.write_bytes(b"this is no tar archive" * 40)
    data = shards[1].read_bytes()
    cut = root / "wds" / "cut.tar"
    cut.write_bytes(data[:2560 + 10])  # inside the third member's data (32 bytes at 2560)
    cut_later = root / "wds" / "cut_later.tar"
    cut_later.write_bytes(data[:3000])  # after its data, before the next header
    bad_header = root / "wds" / "bad_header.tar"
    bad_header.write_bytes(data[:2048] + b"\x7f" * 512 + data[2560:])
    cases = ((garbage, r"shard '<root 0>/wds/garbage.tar' is not a readable tar archive"),
             (cut, r"shard '<root 0>/wds/cut.tar' is truncated: member 's1/00004.jpg' ends at byte "
                   r"2,592, the file has 2,570"),
             (cut_later, r"shard '<root 0>/wds/cut_later.tar' is not a readable tar archive "
                         r"\(unexpected end of data\)"),
             (bad_header, r"shard '<root 0>/wds/bad_header.tar' is not a readable tar archive \(no "
                          r"valid tar header at byte 2,048\)"),
             (root / "wds" / "gone.tar",
              r"cannot read shard '<root 0>/wds/gone.tar': No such file"))
    for path, message in cases:
        with pytest.raises(DataFileError, match=message) as refused:
            Pipeline(wds([shards[0], path]), data_roots=roots)
        assert str(tmp_path) not in str(refused.value)
    with pytest.raises(DataFileError, match=r"member 's0/00000.cls' has 4 bytes, not a "
                                            r"multiple of float64's 8 \(output 1\)"):
        Pipeline(wds(shards, dtypes=["uint8", "float64"]))
    outside = make_shards(tmp_path / "other", [1])[0]
    with pytest.raises(PermissionDenied, match="shard '.*' is outside the data roots"):
        Pipeline(wds([outside]), data_roots=roots)
    with pytest.raises(SpecError, match=r"dtypes': has 1 entries for 2 outputs"):
        Pipeline(wds(shards, dtypes=["uint8"]))
    limits = EngineLimits(max_file_bytes=20)
    with Pipeline(wds(shards, batch_size=1), data_roots=roots, limits=limits) as pipe, \
            pytest.raises(ResourceExhausted, match=r"a member of '<root 0>/wds/shard-0000.tar:"
                                                   r"s0/00001' holds 23 bytes, above the "
                                                   r"server's limit limits.max_file_bytes = 20"):
        run_batches(pipe, 2)  # sample 0's members fit (20 and 4 bytes), sample 1's do not
    with pytest.raises(SpecError, match=r"ext': entry 1 \(';'\) names no extension"):
        Pipeline(wds(shards, ext=["jpg", ";"]))


def test_a_shard_changed_after_indexing_is_data_loss_or_skipped(tmp_path: Path) -> None:
    shards = make_shards(tmp_path / "wds", [2, 2])

    @pipeline_def(batch_size=4, seed=4)
    def four(on_error: str) -> Any:
        return fn.readers.webdataset(paths=[str(p) for p in shards], ext=["jpg", "cls"],
                                     on_error=on_error)

    fail, skip = Pipeline(four("fail"), data_roots=[tmp_path]), \
        Pipeline(four("skip"), data_roots=[tmp_path])
    with fail, skip:
        shards[1].write_bytes(shards[1].read_bytes()[:1024])
        with pytest.raises(DataFileError, match=r"shard '<root 0>/wds/shard-0001.tar' has 1024 "
                                                r"bytes, but \d+ when the pipeline indexed it"):
            fail.run()
        _, labels = skip.run()
        assert [int(c[0]) for c in labels] == [0, 1] and skip.samples_skipped == 2


def test_a_restore_over_a_changed_shard_is_refused_naming_it(tmp_path: Path) -> None:
    root = tmp_path / "data"
    shards = make_shards(root / "wds", [3, 3])
    spec = wds(shards, random_shuffle=True)
    listings = MemoryListings()
    with Pipeline(spec, data_roots=[root], listings=listings) as pipe:
        run_batches(pipe, 2)
        blob = pipe.checkpoint()
    with tarfile.open(shards[1], "w", format=tarfile.GNU_FORMAT) as archive:
        for n in range(3, 6):  # the same samples, one member a byte longer
            for name, data in sample_members(f"s1/{n:05d}", n):
                add_member(archive, name, data + (b"!" if n == 4 and "jpg" in name else b""))
    with pytest.raises(DataChanged, match=r"reader 'wds' \(op 0\): the data set changed: "
                                          r"checkpoint lists 2 files .*first change: shard 1 "
                                          r"'<root 0>/wds/shard-0001.tar' changed "
                                          r"\(.*member index\)") \
            as refused:
        Pipeline(spec, checkpoint=blob, data_roots=[root], listings=listings)
    assert str(root) not in str(refused.value)


def test_members_read_equal_what_tarfile_extracts(tmp_path: Path) -> None:
    shards = make_shards(tmp_path / "wds", [4])
    with tarfile.open(shards[0]) as archive:
        members = {m.name: archive.extractfile(m).read()  # type: ignore[union-attr]
                   for m in archive if m.isreg()}
    with Pipeline(wds(shards, batch_size=4)) as pipe:
        images, labels = pipe.run()
    assert [a.tobytes() for a in images] == [members[f"s0/{n:05d}.jpg"] for n in range(4)]
    assert [c.tobytes() for c in labels] == [members[f"s0/{n:05d}.cls"] for n in range(4)]


def test_the_definition_api_gives_one_output_per_ext_and_checks_dtypes(tmp_path: Path) -> None:
    shards = make_shards(tmp_path / "wds", [2])

    @pipeline_def(batch_size=2, seed=4)
    def outputs(ext: Any, **reader: Any) -> Any:
        out = fn.readers.webdataset(paths=str(shards[0]), ext=ext, **reader)
        return out if isinstance(out, tuple) else (out,)

    assert [op.num_outputs for op in outputs("jpg").spec.ops] == [1]
    assert [op.num_outputs for op in outputs(["jpg", "cls", "jpg;cls"]).spec.ops] == [3]
    with Pipeline(outputs(["jpg", "cls", "jpg;cls"])) as pipe:
        first, _, either = pipe.run()
        assert [a.tobytes() for a in either] == [a.tobytes() for a in first]
    with pytest.raises(SpecError, match=r"dtypes': got \['bool'\], expected a list of "
                                        r"strings, each one of 'uint8', 'uint16'"):
        outputs("jpg", dtypes=["bool"])
    with pytest.raises(SpecError, match=r"ext': needs at least one entry"):
        outputs([])


def test_members_whose_names_are_not_utf8_are_read_and_named(tmp_path: Path) -> None:
    shard = tmp_path / "latin1.tar"
    with tarfile.open(shard, "w", format=tarfile.GNU_FORMAT, encoding="latin-1") as archive:
        for name, data in (("caf\xe9.jpg", b"J1"), ("caf\xe9.cls", b"C1"),
                           ("na\xefve.jpg", b"J2"), ("na\xefve.cls", b"C2")):
            add_member(archive, name, data)  # the names' bytes are Latin-1, not UTF-8
    assert _rows(wds([shard], batch_size=1), 2) == [(b"J1", b"C1"), (b"J2", b"C2")]
    limits = EngineLimits(max_file_bytes=1)
    with Pipeline(wds([shard], batch_size=1), limits=limits) as pipe, \
            pytest.raises(ResourceExhausted, match=r"latin1.tar:caf(\\)+xe9' holds 2 bytes"):
        pipe.run()
