"""``fn.readers.numpy``: DALI's listing, every dtype and order read as NumPy wrote it, no
pickle, sizes checked before allocating, and errors that name files below their root."""

from __future__ import annotations

import os
import pickle
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.lib import format as npy

from conveyor import fn, pipeline_def
from conveyor.errors import (
    DataChanged,
    DataFileError,
    InvalidArgument,
    PermissionDenied,
    ResourceExhausted,
    SpecError,
)
from conveyor_server import Pipeline
from conveyor_server.engine.admission.limits import EngineLimits
from conveyor_server.engine.data.listings import MemoryListings
from conveyor_server.engine.data.roots import DataRoots
from conveyor_server.engine.readers.data_paths import Located, ReaderPaths
from conveyor_server.engine.readers.identity import ReaderIdentity
from conveyor_server.engine.readers.numpy_reader import OP
from tests.support.reader_data import make_npy_folder, npy_array
from tests.support.resume import batch_bytes, run_batches

DTYPES = ("bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "int64", "uint64",
          "float16", "float32", "float64")


@pipeline_def(batch_size=1, seed=3, enable_checkpointing=True)
def arrays(**reader: Any) -> Any:
    return fn.readers.numpy(name="arrays", **reader)


def read_all(spec: Any, count: int, **kw: Any) -> list[np.ndarray]:
    with Pipeline(spec, **kw) as pipe:
        return [sample for batch in run_batches(pipe, count) for sample in batch[0]]


def test_every_dtype_and_order_reads_back_as_numpy_wrote_it(tmp_path: Path) -> None:
    files: list[str] = []
    expected: list[np.ndarray] = []
    for dtype in DTYPES:
        for order in ("<", ">"):
            for fortran in (False, True):
                array = npy_array(len(files), dtype, (3, 5, 2)).astype(
                    np.dtype(dtype).newbyteorder(order))
                path = tmp_path / f"{dtype}{'_be' if order == '>' else ''}_{fortran}.npy"
                np.save(path, np.asfortranarray(array) if fortran else array)
                files.append(path.name)
                expected.append(np.load(path))
    for extra in (np.float32(2.5), np.zeros((0, 4), np.int16)):  # a scalar, an empty one
        path = tmp_path / f"extra_{len(files)}.npy"
        np.save(path, extra)
        files.append(path.name)
        expected.append(np.load(path))
    with (tmp_path / "version2.npy").open("wb") as f:  # format 2.0 (4-byte header length)
        npy.write_array(f, npy_array(5, "int16", (4, 3)), version=(2, 0))
    files.append("version2.npy")
    expected.append(np.load(tmp_path / "version2.npy"))
    got = read_all(arrays(file_root=str(tmp_path), files=files), len(files))
    for name, want, array in zip(files, expected, got, strict=True):
        assert array.dtype == want.dtype.newbyteorder("=") and array.dtype.isnative, name
        assert array.shape == want.shape and array.flags.c_contiguous, name
        assert np.array_equal(array, want), name


def test_file_root_is_listed_as_dali_lists_it(tmp_path: Path) -> None:
    paths = make_npy_folder(tmp_path / "npy", count=10)
    got = read_all(arrays(file_root=str(tmp_path / "npy")), len(paths))
    assert [a.tobytes() for a in got] == [np.load(p).tobytes() for p in paths]
    assert len({a.shape for a in got}) > 1  # shapes differ from sample to sample
    with Pipeline(arrays(file_root=str(tmp_path / "npy"))) as pipe:
        assert pipe.epoch_size() == len(paths)  # notes.txt is left out by "*.npy"
    picked = read_all(arrays(file_root=str(tmp_path / "npy"), file_filter="arr_00[13]*"), 2)
    assert [a.tobytes() for a in picked] == [np.load(p).tobytes() for p in paths
                                             if p.name in ("arr_001.npy", "arr_003.npy")]


def test_files_and_file_list_are_relative_to_file_root(tmp_path: Path) -> None:
    paths = make_npy_folder(tmp_path / "npy", count=6)
    chosen = [str(p.relative_to(tmp_path / "npy")) for p in paths[::-1][:4]]
    by_files = read_all(arrays(file_root=str(tmp_path / "npy"), files=chosen), 4)
    listing = tmp_path / "npy" / "list.txt"
    listing.write_text("\n".join(chosen) + "\n\n")
    by_list = read_all(arrays(file_list=str(listing)), 4)
    with_root = read_all(arrays(file_list=str(listing), file_root=str(tmp_path / "npy")), 4)
    want = [np.load(tmp_path / "npy" / c).tobytes() for c in chosen]
    assert [a.tobytes() for a in by_files] == [a.tobytes() for a in by_list] == \
        [a.tobytes() for a in with_root] == want
    single = read_all(arrays(file_root=str(tmp_path / "npy"), files=chosen[0]), 1)
    assert single[0].tobytes() == want[0]  # one string, as DALI takes it


class _Touch:
    """Unpickling this creates a file: proof that nothing was unpickled if it is absent."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (Path.touch, (self.marker,))


def test_object_arrays_are_refused_without_unpickling(tmp_path: Path) -> None:
    marker = tmp_path / "unpickled"
    path = tmp_path / "npy" / "objects.npy"
    path.parent.mkdir()
    with path.open("wb") as f:
        npy.write_array_header_1_0(f, {"descr": "|O", "fortran_order": False, "shape": (1,)})
        pickle.dump(np.array([_Touch(marker)], dtype=object), f)
    with pytest.raises(DataFileError, match=r"readers.numpy: '<root 0>/npy/objects.npy' "
                                            r"holds Python objects .*pickle"):
        read_all(arrays(file_root=str(tmp_path / "npy")), 1, data_roots=[tmp_path])
    assert not marker.exists()
    complex_path = tmp_path / "npy" / "complex.npy"
    np.save(complex_path, np.ones(3, np.complex64))
    with pytest.raises(DataFileError, match=r"has dtype '<c8': supported are bool, uint8"):
        read_all(arrays(file_root=str(tmp_path / "npy"), files=["complex.npy"]), 1)


def _peak_bytes(spec: Any, **kw: Any) -> tuple[int, BaseException]:
    """Peak memory Python allocated while the first batch failed, and the error."""
    with Pipeline(spec, **kw) as pipe:
        tracemalloc.start()
        try:
            pipe.run()
        except Exception as exc:  # the error under test, returned
            error = exc
        else:
            raise AssertionError("the batch did not fail")
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    return peak, error


def test_a_header_declaring_a_huge_array_is_refused_from_the_file_size(tmp_path: Path) -> None:
    path = tmp_path / "huge.npy"
    with path.open("wb") as f:
        npy.write_array_header_1_0(f, {"descr": "<f8", "fortran_order": False,
                                       "shape": (10**12,)})
        f.write(b"\0" * 16)
    peak, error = _peak_bytes(arrays(file_root=str(tmp_path)), data_roots=[tmp_path])
    assert isinstance(error, DataFileError)
    assert "'<root 0>/huge.npy' declares 1000000000000 float64 = 8,000,000,000,000 bytes of " \
           "data, but the file holds 16 after its header" in str(error)
    assert peak < 1 << 20, f"{peak} bytes allocated to refuse it"


def test_an_array_above_max_batch_bytes_is_refused_before_its_data(tmp_path: Path) -> None:
    np.save(tmp_path / "big.npy", np.ones((512, 512), np.float32))  # 1 MiB, consistent
    limits = EngineLimits(max_batch_bytes=100_000)
    peak, error = _peak_bytes(arrays(file_root=str(tmp_path)), limits=limits,
                              data_roots=[tmp_path])
    assert isinstance(error, ResourceExhausted)
    assert "'<root 0>/big.npy' holds 512x512 float32 = 1,048,576 bytes, above the server's limit " \
           "limits.max_batch_bytes = 100,000" in str(error)
    assert peak < 200_000, f"{peak} bytes allocated to refuse it"


def test_files_are_opened_beneath_their_root_and_bounded(tmp_path: Path) -> None:
    root = tmp_path / "data"
    paths = make_npy_folder(root / "npy", count=4, subfolders=0)
    secret = tmp_path / "secret.npy"
    np.save(secret, np.arange(4.0))
    spec = arrays(file_root=str(root / "npy"))
    with Pipeline(spec, data_roots=[root]) as pipe:
        paths[0].unlink()
        paths[0].symlink_to(secret)  # swapped in after the listing
        with pytest.raises(DataFileError, match=r"cannot read '<root 0>/npy/arr_000.npy': a "
                                                r"symbolic link .* now stands on its path"):
            pipe.run()
    paths[0].unlink()
    np.save(paths[0], np.ones(100_000, np.uint8))
    limits = EngineLimits(max_file_bytes=50_000)
    with Pipeline(spec, data_roots=[root], limits=limits) as pipe, \
            pytest.raises(ResourceExhausted, match=r"'<root 0>/npy/arr_000.npy' is 100,128 bytes, "
                                                   r"above the server's limit "
                                                   r"limits.max_file_bytes = 50,000"):
        pipe.run()
    with pytest.raises(SpecError, match=r"argument 'file_root': contains a NUL character"):
        Pipeline(arrays(file_root="npy\0x"), data_roots=[root])


def test_errors_name_files_below_their_data_root_and_never_the_root(tmp_path: Path) -> None:
    root = tmp_path / "data"
    make_npy_folder(root / "npy", count=4)
    roots = [root]
    with pytest.raises(DataFileError, match=r"cannot read file '<root 0>/npy/gone.npy': No "
                                            r"such file") as missing:
        Pipeline(arrays(file_root=str(root / "npy"), files=["gone.npy"]), data_roots=roots)
    outside = tmp_path / "elsewhere.npy"
    np.save(outside, np.ones(2))
    with pytest.raises(PermissionDenied, match="outside the data roots") as escaped:
        Pipeline(arrays(file_root=str(root / "npy"), files=["../../elsewhere.npy"]),
                 data_roots=roots)
    (root / "npy" / "link.npy").symlink_to(outside)
    with pytest.raises(PermissionDenied, match="outside the data roots") as linked:
        Pipeline(arrays(file_root=str(root / "npy")), data_roots=roots)
    with pytest.raises(InvalidArgument, match=r"no files found in '<root 0>/npy/part_0' matching "):
        Pipeline(arrays(file_root=str(root / "npy" / "part_0"), file_filter="*.npz"),
                 data_roots=roots)
    assert "'<root 0>/npy/link.npy' is outside" in str(linked.value)
    for error in (missing.value, escaped.value, linked.value):  # the caller's own path at most
        assert str(root) not in str(error), str(error)
    with pytest.raises(SpecError, match="one of file_root, file_list or files"):
        Pipeline(arrays())


def test_a_bad_file_fails_or_is_skipped_by_on_error(tmp_path: Path) -> None:
    paths = make_npy_folder(tmp_path / "npy", count=4, subfolders=0)
    paths[1].write_bytes(b"not a numpy file at all")

    @pipeline_def(batch_size=4, seed=3)
    def four(on_error: str) -> Any:
        return fn.readers.numpy(file_root=str(tmp_path / "npy"), on_error=on_error)

    with Pipeline(four("fail"), data_roots=[tmp_path]) as pipe, \
            pytest.raises(DataFileError, match=r"'<root 0>/npy/arr_001.npy' is not a .npy file"):
        pipe.run()
    with Pipeline(four("skip"), data_roots=[tmp_path]) as pipe:
        (batch,) = pipe.run()
        assert [a.tobytes() for a in batch] == [np.load(p).tobytes() for p in
                                                (paths[0], paths[2], paths[3])]
        assert pipe.samples_skipped == 1


def test_samples_of_one_batch_must_share_a_dtype(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.ones(3, np.int16))
    np.save(tmp_path / "b.npy", np.ones(3, np.float32))

    @pipeline_def(batch_size=2, seed=3, enable_checkpointing=True)
    def mixed() -> Any:
        return fn.readers.numpy(file_root=str(tmp_path))

    with Pipeline(mixed(), data_roots=[tmp_path]) as pipe:
        for _ in range(2):  # the pipeline stays at its position: the same error again
            with pytest.raises(DataFileError, match=r"sample 1 \('<root 0>/b.npy'\) is float32 "
                               r"with 1 dimensions, sample 0 \('<root 0>/a.npy'\) is int16"):
                pipe.run()
        assert pipe.batches_returned == 0


def test_a_file_changed_after_listing_is_data_loss_and_a_restore_is_refused(
        tmp_path: Path) -> None:
    root = tmp_path / "data"
    paths = make_npy_folder(root / "npy", count=6)
    spec = arrays(file_root=str(root / "npy"), random_shuffle=True)
    listings = MemoryListings()
    with Pipeline(spec, data_roots=[root], listings=listings) as pipe:
        run_batches(pipe, 2)
        blob = pipe.checkpoint()
        expected = batch_bytes(pipe.run())
    with Pipeline(spec, checkpoint=blob, data_roots=[root], listings=listings) as again:
        assert batch_bytes(again.run()) == expected
        np.save(paths[2], np.ones((9, 9), np.float32))  # another size
        name = f"<root 0>/{paths[2].relative_to(root)}"  # the file listed third
        with pytest.raises(DataFileError, match=rf"'{name}' has \d+ bytes, but \d+ when the "
                                                "pipeline listed it"):
            run_batches(again, 2 * len(paths))
    os.utime(paths[2], ns=(1, 1))
    with pytest.raises(DataChanged, match=rf"first change: file 2 '{name}' changed "
                                          r"\(size \d+ -> \d+, modification time\)") \
            as refused:
        Pipeline(spec, checkpoint=blob, data_roots=[root], listings=listings)
    assert str(root) not in str(refused.value)


def test_first_change_names_added_removed_and_changed_files() -> None:
    paths = ReaderPaths(OP, DataRoots(["/r"]))
    files = [Located(f"/r/npy/{i}.npy", 100 + i, 7, 0, f"npy/{i}.npy") for i in range(3)]
    listing = ReaderIdentity(paths, files, "metadata").listing()

    def change(new: list[Located], derived: list[str] | None = None,
               kind: str = "file") -> str:
        identity = ReaderIdentity(paths, new, "metadata", derived=derived, kind=kind)
        return identity.first_change(listing)

    assert change(files) == "no file differs from the earlier listing"
    assert change(files[:2]) == "file 2 '<root 0>/npy/2.npy' was removed"
    assert change([*files, Located("/r/9.npy", 1, 7, 0, "9.npy")], kind="shard") == \
        "shard 3 '<root 0>/9.npy' was added"
    moved = [files[0], Located("/r/npy/1.npy", 99, 8, 0, "npy/1.npy"), files[2]]
    assert change(moved, ["", "members", ""]) == \
        "file 1 '<root 0>/npy/1.npy' changed (size 101 -> 99, modification time, member index)"
    assert ReaderIdentity(paths, files, "metadata", derived=["", "x", ""]).digest != \
        ReaderIdentity(paths, files, "metadata").digest
