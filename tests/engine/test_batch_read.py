"""A batch's files read in one call (engine/data/file_batch.py, batch_read.py and .c) give
what reading each file alone gives (``DataFiles.read``): the same bytes over nested folders
and sizes from 0 to a few MB, and the same error, message and log line for a file missing,
shrunk, grown, above ``limits.max_file_bytes``, turned into a folder or a FIFO, swapped for a
symlink, or below a folder swapped for one; the compiled reader, the same source built
without openat2 and the pure-Python one agree; a pipeline's batch with some files failing
skips, replaces or fails as it does file by file; the roots' directories are opened once,
closed with the pipeline (not under a read), and a root swapped later is not followed."""

from __future__ import annotations

import errno
import importlib.util
import logging
import os
import shlex
import shutil
import subprocess
import sysconfig
import threading
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from conveyor import errors, fn, pipeline_def
from conveyor_server import Pipeline
from conveyor_server.engine.admission.limits import EngineLimits
from conveyor_server.engine.data import batch_read, file_batch
from conveyor_server.engine.data.entries import FileEntry
from conveyor_server.engine.data.file_batch import FileBatch
from conveyor_server.engine.data.file_list import resolve
from conveyor_server.engine.data.files import DataFiles
from conveyor_server.engine.data.root_handles import RootHandles
from conveyor_server.engine.data.roots import DataRoots

SERVER = Path(__file__).resolve().parents[2] / "server"
SOURCE = SERVER / "conveyor_server" / "engine" / "data" / "batch_read.c"
SIZES = [0, 1, 2, 4095, 4096, 4097, 65536, 110_000, 1 << 20, (3 << 20) + 7]


def c_compiler() -> str | None:
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shutil.which(shlex.split(cc)[0])


def test_the_reader_is_compiled_where_a_compiler_is() -> None:
    # Without it every batch would be read by the Python loop (the same results, slower).
    if c_compiler() is None:
        assert batch_read.READER == "Python"
    else:
        assert batch_read.READER == "compiled", (
            f"the server's C extension (_batch_read) was not built although {c_compiler()} "
            "is here: `pip install -e ./server -v` shows the compiler's error")


needs_compiled = pytest.mark.skipif(batch_read.READER != "compiled",
                                    reason="installed without a C compiler")


@pytest.fixture(scope="module")
def walk_only(tmp_path_factory: pytest.TempPathFactory) -> ModuleType | None:
    """The compiled reader built never to call openat2 (as on a kernel without it)."""
    cc = c_compiler()
    if cc is None:
        return None
    out = tmp_path_factory.mktemp("walk") / "_batch_read.abi3.so"
    subprocess.run([cc, "-O2", "-DBATCH_READ_NO_OPENAT2", "-DPy_LIMITED_API=0x030B0000",
                    "-fPIC", "-shared", f"-I{sysconfig.get_paths()['include']}", str(SOURCE),
                    "-o", str(out)], check=True, capture_output=True, timeout=120)
    spec = importlib.util.spec_from_file_location("_batch_read", out)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(params=["compiled", "walk", "python"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
           walk_only: ModuleType | None) -> str:
    """Which reads the batches: the compiled reader (openat2), the same built without
    openat2, or the Python loop."""
    if request.param == "python":
        monkeypatch.setattr(file_batch, "read_files", batch_read.read_files_python)
    elif batch_read.READER != "compiled" or walk_only is None:
        pytest.skip("installed without a C compiler")
    elif request.param == "walk":
        monkeypatch.setattr(file_batch, "read_files", walk_only.read_files)
    return str(request.param)


def outcome(read: Callable[[], np.ndarray]) -> tuple[str, Any]:
    try:
        return "bytes", bytes(read())
    except errors.ConveyorError as exc:
        return type(exc).__name__, exc.message


def compare(files: DataFiles, entries: list[FileEntry],
            caplog: pytest.LogCaptureFixture) -> list[tuple[str, Any]]:
    """Each entry read in one batch, then alone: the same outcome and log lines; the
    outcomes."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="conveyor.engine"):
        batch = FileBatch(files, entries)
        together = [outcome(partial(batch.take, i)) for i in range(len(entries))]
        batch_log = [r.getMessage() for r in caplog.records]
        caplog.clear()
        alone = [outcome(partial(files.read, e)) for e in entries]
        alone_log = [r.getMessage() for r in caplog.records]
    assert together == alone
    assert batch_log == alone_log
    labels = [int(batch.label(i)[0]) for i in range(len(entries))]
    assert labels == [e.label for e in entries]
    assert all(batch.label(i).dtype == np.int32 and batch.label(i).shape == (1,)
               for i in range(len(entries)))
    return together


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, list[str]]:
    """``root/data/...``: files of every size of SIZES in nested folders, and the names."""
    data = tmp_path / "root" / "data"
    rng = np.random.default_rng(3)
    names = []
    for n, size in enumerate(SIZES):
        name = f"d{n % 3}/{'deep/' * (n % 4)}f{n}.bin"
        path = data / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        names.append(name)
    (data / "empty").mkdir()
    (data / "empty" / "zero.bin").write_bytes(b"")
    names.append("empty/zero.bin")
    return data, names


def listed(data: Path, names: list[str]) -> tuple[DataFiles, list[FileEntry]]:
    root = data.parent
    entries = resolve({"file_root": str(data), "files": names}, [root])
    return DataFiles(DataRoots([root])), entries


def test_the_bytes_are_each_files_alone(tree: tuple[Path, list[str]], reader: str,
                                        caplog: pytest.LogCaptureFixture) -> None:
    data, names = tree
    files, entries = listed(data, names)
    try:
        got = compare(files, entries * 2, caplog)  # each file twice in one batch too
    finally:
        files.close()
    assert got == [("bytes", (data / n).read_bytes()) for n in names * 2]


def test_files_past_the_batch_buffer_are_read_alone(tree: tuple[Path, list[str]], reader: str,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    data, names = tree
    monkeypatch.setattr(file_batch, "MAX_BYTES", 1 << 20)  # the first files; the rest alone
    files, entries = listed(data, names)
    try:
        got = compare(files, entries, caplog)
    finally:
        files.close()
    assert got == [("bytes", (data / n).read_bytes()) for n in names]


def test_without_data_roots_files_are_read_as_spelled(tree: tuple[Path, list[str]],
                                                      reader: str,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    data, names = tree
    entries = resolve({"file_root": str(data), "files": names})
    (data / names[3]).unlink()
    got = compare(DataFiles(None), entries, caplog)
    assert got[3] == ("DataFileError", f"readers.file: cannot read {entries[3].path!r}: "
                                       "No such file or directory")
    assert got[4] == ("bytes", (data / names[4]).read_bytes())


def swap(victim: Path, target: Path) -> None:
    """Replace ``victim`` by a symlink to ``target`` in one rename."""
    link = victim.with_name(victim.name + ".new")
    os.symlink(target, link)
    os.replace(link, victim)


@pytest.fixture
def broken(tmp_path: Path) -> tuple[Path, list[str], dict[str, str]]:
    """``root/data/`` with a file per way of failing (and good files between them), listed,
    then broken; and what each failure's message says."""
    data, outside = tmp_path / "root" / "data", tmp_path / "outside"
    cases = ["good0", "missing", "shrank", "grew", "too big", "listed too big", "a folder",
             "a fifo", "good1", "file swapped", "folder swapped", "below a file", "good2"]
    for case in cases:
        folder = data / case.replace(" ", "_")
        folder.mkdir(parents=True)
        (folder / "f.bin").write_bytes((case.encode() * 1200)[:1200])
    (data / "listed_too_big" / "f.bin").write_bytes(b"x" * 6000)
    outside.mkdir()
    (outside / "f.bin").write_bytes(b"o" * 1200)  # the same size
    names = [f"{case.replace(' ', '_')}/f.bin" for case in cases]
    return data, names, {
        "missing": "No such file or directory",
        "shrank": "has 1000 bytes, but 1200 when the pipeline listed it",
        "grew": "has 2401 bytes, but 1200 when the pipeline listed it",
        "too big": "is 5,000 bytes, above the server's limit limits.max_file_bytes = 4,000",
        "listed too big": "is 6,000 bytes, above the server's limit",
        "a folder": "it is not a regular file (mode d",
        "a fifo": "it is not a regular file (mode p",
        "file swapped": "a symbolic link (or something that is not a folder) now stands",
        "folder swapped": "a symbolic link (or something that is not a folder) now stands",
        "below a file": "a symbolic link (or something that is not a folder) now stands",
    }


def break_them(data: Path, outside: Path) -> None:
    (data / "missing" / "f.bin").unlink()
    (data / "shrank" / "f.bin").write_bytes(b"s" * 1000)
    (data / "grew" / "f.bin").write_bytes(b"g" * 2401)
    (data / "too_big" / "f.bin").write_bytes(b"b" * 5000)
    (data / "a_folder" / "f.bin").unlink()
    (data / "a_folder" / "f.bin").mkdir()
    (data / "a_fifo" / "f.bin").unlink()
    os.mkfifo(data / "a_fifo" / "f.bin")
    swap(data / "file_swapped" / "f.bin", outside / "f.bin")
    shutil.rmtree(data / "folder_swapped")
    swap(data / "folder_swapped", outside)
    shutil.rmtree(data / "below_a_file")
    (data / "below_a_file").write_bytes(b"not a folder")


def test_each_failure_is_the_one_a_read_alone_raises(
        broken: tuple[Path, list[str], dict[str, str]], reader: str,
        caplog: pytest.LogCaptureFixture) -> None:
    data, names, said = broken
    root = data.parent
    entries = resolve({"file_root": str(data), "files": names}, [root])
    break_them(data, root.parent / "outside")
    files = DataFiles(DataRoots([root]), EngineLimits(max_file_bytes=4000))
    try:
        got = compare(files, entries, caplog)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="conveyor.engine"):
            for i in range(len(entries)):
                outcome(partial(FileBatch(files, entries).take, i))
    finally:
        files.close()
    for name, (kind, what) in zip(names, got, strict=True):
        case = name.split("/")[0].replace("_", " ")
        if case.startswith("good"):
            assert (kind, what) == ("bytes", (data / name).read_bytes())
            continue
        assert said[case] in what, (case, what)
        assert what.startswith("readers.file: ") and f"'<root 0>/data/{name}'" in what
        assert kind == ("ResourceExhausted" if "too big" in case else "DataFileError"), case
    # The symlink rule's refusals are logged with the absolute path, once per read.
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 3 and all("a symlink or a non-folder is on its path beneath "
                                    f"{root}" in m for m in logged), logged


def test_a_path_with_dots_is_refused_as_alone(tree: tuple[Path, list[str]], reader: str,
                                              caplog: pytest.LogCaptureFixture) -> None:
    data, names = tree
    files, entries = listed(data, names)
    odd = FileEntry(str(data / names[2]), SIZES[2], 0, root=0,
                    relative="data/d2/../" + names[2])
    try:
        got = compare(files, [entries[0], odd], caplog)
    finally:
        files.close()
    assert got[1] == ("DataFileError", f"readers.file: cannot read '<root 0>/{odd.relative}': "
                                       "a relative path with '.' or '..'")


def test_the_readers_report_the_same_statuses(broken: tuple[Path, list[str], dict[str, str]],
                                              walk_only: ModuleType | None) -> None:
    """The raw (status, a, b) and buffer: the walk in C and in Python make the same system
    calls; openat2 may differ only in the errno of a folder swapped for a symlink (ELOOP
    where the walk's O_DIRECTORY | O_NOFOLLOW gets ENOTDIR: both the symlink rule's)."""
    data, names, _ = broken
    root = data.parent
    entries = resolve({"file_root": str(data), "files": names}, [root])
    break_them(data, root.parent / "outside")
    readers: dict[str, batch_read.ReadFiles] = {"python": batch_read.read_files_python}
    if walk_only is not None and batch_read.READER == "compiled":
        readers |= {"walk": walk_only.read_files, "compiled": batch_read.read_files}
    handles = RootHandles(DataRoots([root]))
    sizes = np.array([e.size for e in entries], np.int64)
    wants = np.minimum(sizes, 4000) + 1
    offsets = np.cumsum(wants) - wants
    got = {}
    with handles.held([0]) as fds:
        assert isinstance(fds[0], int)
        dirfds = np.full(len(entries), fds[0], np.int32)
        for name, read in readers.items():
            out = np.zeros(int(wants.sum()), np.uint8)
            results = np.full((len(entries), 3), -9, np.int64)
            read(dirfds, [e.relative for e in entries], sizes, offsets, 4000, out, results)
            got[name] = (results, out)
    handles.close()
    for name, (results, out) in got.items():
        np.testing.assert_array_equal(out, got["python"][1], err_msg=name)
        if name == "compiled":  # a folder swapped for a symlink: openat2 says ELOOP
            assert results[10, 1] in (errno.ELOOP, errno.ENOTDIR)
            results = results.copy()
            results[10, 1] = got["python"][0][10, 1]
        np.testing.assert_array_equal(results, got["python"][0], err_msg=name)
    statuses = got["python"][0][:, 0].tolist()
    assert statuses == [batch_read.STATUS_OK, batch_read.STATUS_OPEN, batch_read.STATUS_CHANGED,
                        batch_read.STATUS_CHANGED, batch_read.STATUS_TOO_BIG,
                        batch_read.STATUS_TOO_BIG, batch_read.STATUS_NOT_FILE,
                        batch_read.STATUS_NOT_FILE, batch_read.STATUS_OK,
                        batch_read.STATUS_OPEN, batch_read.STATUS_OPEN, batch_read.STATUS_OPEN,
                        batch_read.STATUS_OK]
    assert got["python"][0][9, 1] == errno.ELOOP  # the file swapped for a symlink


@needs_compiled
def test_the_compiled_constants_are_the_pythons() -> None:
    from conveyor_server.engine.data import _batch_read

    names = [n for n in dir(batch_read) if n.startswith("STATUS_")]
    assert len(names) == 8
    assert {n: getattr(_batch_read, n) for n in names} == \
        {n: getattr(batch_read, n) for n in names}


@pytest.mark.parametrize("which", ["compiled", "python"])
def test_inconsistent_arguments_are_refused_before_a_read(tree: tuple[Path, list[str]],
                                                          which: str) -> None:
    if which == "compiled" and batch_read.READER != "compiled":
        pytest.skip("installed without a C compiler")
    read = batch_read.read_files if which == "compiled" else batch_read.read_files_python
    data, names = tree
    path = str(data / names[3])
    one = (np.array([-1], np.int32), [path], np.array([4095], np.int64))
    results = np.zeros((1, 3), np.int64)
    with pytest.raises(ValueError, match="not inside the buffer"):
        read(*one, np.array([1], np.int64), -1, np.zeros(4096, np.uint8), results)
    with pytest.raises(ValueError, match="not inside the buffer"):
        read(*one, np.array([0], np.int64), 100, np.zeros(100, np.uint8), results)
    with pytest.raises(ValueError, match="one entry per path"):
        read(*one, np.array([0], np.int64), -1, np.zeros(4096, np.uint8),
             np.zeros((2, 3), np.int64))
    assert not results.any()
    read(*one, np.array([0], np.int64), 100, np.zeros(101, np.uint8), results)
    assert results.tolist() == [[batch_read.STATUS_TOO_BIG, 4095, 0]]


# -- roots' directories -------------------------------------------------------------------


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_roots_directory_is_opened_once_and_closed_with_the_files(
        tree: tuple[Path, list[str]], reader: str) -> None:
    data, names = tree
    files, entries = listed(data, names)
    before = open_descriptors()
    for _ in range(3):
        batch = FileBatch(files, entries)
        assert bytes(batch.take(1)) == (data / names[1]).read_bytes()
        assert bytes(files.read(entries[2])) == (data / names[2]).read_bytes()
    assert open_descriptors() == before + 1  # the root's directory, nothing else
    files.close()
    assert open_descriptors() == before
    # A read after close() opens the root for itself and closes it after.
    assert bytes(FileBatch(files, entries).take(4)) == (data / names[4]).read_bytes()
    assert bytes(files.read(entries[4])) == (data / names[4]).read_bytes()
    assert open_descriptors() == before


def test_only_the_roots_read_from_are_opened(tree: tuple[Path, list[str]],
                                            reader: str) -> None:
    data, names = tree
    other = data.parent.with_name("other")
    other.mkdir()
    roots = DataRoots([other, data.parent, "s3://bucket/prefix"])
    entries = resolve({"file_root": str(data), "files": names}, [other, data.parent])
    assert {e.root for e in entries} == {1}
    files = DataFiles(roots)
    before = open_descriptors()
    try:
        assert bytes(FileBatch(files, entries).take(5)) == (data / names[5]).read_bytes()
        assert open_descriptors() == before + 1
        assert files.handles is not None
        with files.handles.held([1]) as fds:
            assert fds[0] is None and isinstance(fds[1], int) and fds[2] is None
    finally:
        files.close()
    assert open_descriptors() == before


def test_closing_under_a_read_waits_for_it(tree: tuple[Path, list[str]]) -> None:
    data, _ = tree
    handles = RootHandles(DataRoots([data.parent]))
    before = open_descriptors()
    with handles.held([0]) as fds:
        handles.close()  # on another thread, as a pipeline closes under a batch
        assert isinstance(fds[0], int)
        assert os.listdir(fds[0]) == ["data"]  # still the root's
        assert open_descriptors() == before + 1
    assert open_descriptors() == before


def test_threads_share_the_roots(tree: tuple[Path, list[str]], reader: str) -> None:
    data, names = tree
    files, entries = listed(data, names)
    expected = [(data / n).read_bytes() for n in names]
    failures: list[BaseException] = []

    def run() -> None:
        try:
            for _ in range(20):
                batch = FileBatch(files, entries)
                assert [bytes(batch.take(i)) for i in range(len(entries))] == expected
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    files.close()
    assert failures == []


def test_a_root_swapped_after_the_first_read_is_not_followed(
        tree: tuple[Path, list[str]], reader: str, caplog: pytest.LogCaptureFixture) -> None:
    data, names = tree
    root = data.parent
    files, entries = listed(data, names)
    original = [(data / n).read_bytes() for n in names]
    try:
        assert bytes(FileBatch(files, entries).take(3)) == original[3]
        # The root renamed away and a copy of other bytes put in its place: the pipeline
        # goes on reading the directory it listed.
        moved = root.with_name("moved")
        root.rename(moved)
        shutil.copytree(moved, root)
        for n in names:
            (root / "data" / n).write_bytes(b"z" * (root / "data" / n).stat().st_size)
        got = compare(files, entries, caplog)
        assert got == [("bytes", o) for o in original]
    finally:
        files.close()


def test_a_root_swapped_for_a_symlink_before_the_first_read_is_refused(
        tree: tuple[Path, list[str]], reader: str, caplog: pytest.LogCaptureFixture) -> None:
    data, names = tree
    root = data.parent
    files, entries = listed(data, names)
    copy = root.with_name("copy")
    shutil.copytree(root, copy)
    shutil.rmtree(root)
    swap(root, copy)
    try:
        got = compare(files, entries, caplog)
    finally:
        files.close()
    assert all(kind == "DataFileError" and "a symbolic link" in what for kind, what in got)


def test_a_root_that_cannot_be_opened_fails_its_files_and_is_tried_again(
        tree: tuple[Path, list[str]], reader: str, caplog: pytest.LogCaptureFixture) -> None:
    data, names = tree
    root = data.parent
    files, entries = listed(data, names)
    hidden = root.with_name("hidden")
    root.rename(hidden)
    try:
        got = compare(files, entries, caplog)
        assert {what.split(": ", 2)[2] for _, what in got} == {"No such file or directory"}
        hidden.rename(root)
        assert compare(files, entries, caplog) == [
            ("bytes", (data / n).read_bytes()) for n in names]
    finally:
        files.close()


# -- in a pipeline ------------------------------------------------------------------------


@pipeline_def(batch_size=6, num_threads=2, seed=1, enable_checkpointing=True)
def raw(on_error: str = "fail", **reader: Any) -> Any:
    files, labels = fn.readers.file(on_error=on_error, name="reader", **reader)
    return files, labels


@pytest.fixture
def six(tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    data = tmp_path / "root" / "data"
    names = [f"c{i % 2}/f{i}.bin" for i in range(6)]
    for i, n in enumerate(names):
        (data / n).parent.mkdir(parents=True, exist_ok=True)
        (data / n).write_bytes(bytes([i]) * (1000 + 10 * i))
    yield data, names


def break_two(data: Path, names: list[str]) -> None:
    (data / names[1]).unlink()
    (data / names[3]).write_bytes(b"short")


def test_a_batch_with_failures_is_skipped_as_file_by_file(six: tuple[Path, list[str]],
                                                          reader: str) -> None:
    data, names = six
    original = [(data / n).read_bytes() for n in names]
    with Pipeline(raw("skip", file_root=str(data), files=names),
                  data_roots=[data.parent]) as pipe:
        break_two(data, names)
        files, labels = pipe.run()
        assert [bytes(f) for f in files] == [original[i] for i in (0, 2, 4, 5)]
        assert [int(np.asarray(x)[0]) for x in labels] == [0, 2, 4, 5]
        assert pipe.samples_skipped == 2


def test_a_batch_with_failures_is_replaced_as_file_by_file(six: tuple[Path, list[str]],
                                                           reader: str) -> None:
    data, names = six
    original = [(data / n).read_bytes() for n in names]
    with Pipeline(raw("replace", file_root=str(data), files=names),
                  data_roots=[data.parent]) as pipe:
        break_two(data, names)
        files, labels = pipe.run()
        assert [bytes(f) for f in files] == [original[i] for i in (0, 2, 2, 4, 4, 5)]
        assert [int(np.asarray(x)[0]) for x in labels] == [0, 2, 2, 4, 4, 5]
        assert all(np.asarray(x).dtype == np.int32 and np.asarray(x).shape == (1,)
                   for x in labels)
        assert pipe.samples_replaced == 2


def test_a_failing_batch_raises_its_first_error_in_sample_order(six: tuple[Path, list[str]],
                                                                reader: str) -> None:
    data, names = six
    with Pipeline(raw(file_root=str(data), files=names), data_roots=[data.parent]) as pipe:
        break_two(data, names)
        with pytest.raises(errors.DataFileError,
                           match=r"cannot read '<root 0>/data/c1/f1\.bin': No such file"):
            pipe.run()


def test_the_batch_is_read_on_a_worker_with_the_bytes_a_pipeline_without_roots_reads(
        six: tuple[Path, list[str]], reader: str, monkeypatch: pytest.MonkeyPatch) -> None:
    data, names = six
    seen: list[str] = []
    made = FileBatch.__init__

    def recording(self: FileBatch, *args: Any) -> None:
        seen.append(threading.current_thread().name)
        made(self, *args)

    monkeypatch.setattr(FileBatch, "__init__", recording)
    with Pipeline(raw(file_root=str(data), files=names), data_roots=[data.parent]) as confined, \
            Pipeline(raw(file_root=str(data), files=names)) as free:
        for _ in range(3):
            got, expected = confined.run(), free.run()
            assert [bytes(f) for f in got[0]] == [bytes(f) for f in expected[0]]
            assert [np.asarray(x).tolist() for x in got[1]] == \
                [np.asarray(x).tolist() for x in expected[1]]
    assert seen and all(name.startswith("conveyor-worker") for name in seen), seen


def test_the_limit_holds_in_a_pipeline(six: tuple[Path, list[str]], reader: str) -> None:
    data, names = six
    limits = EngineLimits(max_file_bytes=1030)
    with Pipeline(raw("skip", file_root=str(data), files=names), data_roots=[data.parent],
                  limits=limits) as pipe:
        files, _ = pipe.run()
        assert [len(f) for f in files] == [1000, 1010, 1020, 1030]
