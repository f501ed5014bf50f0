"""Data roots hold: every path-traversal attempt is refused (``..``, absolute paths,
symlinks out, symlinks swapped in after the pipeline was built, for a file or a folder);
folder symlink cycles end; names a listing cannot hold are refused; files above
``limits.max_file_bytes`` are refused before they are read."""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor import errors, fn, pipeline_def
from conveyor_server import Pipeline
from conveyor_server.engine.admission.limits import EngineLimits
from conveyor_server.engine.data.file_list import resolve
from conveyor_server.engine.data.files import read_at_most
from tests.support.images import make_image_folder

SECRET = b"secret!" * 100


@pipeline_def(batch_size=2, num_threads=1, seed=1, enable_checkpointing=True)
def raw(on_error: str = "fail", **reader: Any) -> Any:
    """The files' bytes themselves, so a test sees exactly what was read."""
    files, labels = fn.readers.file(on_error=on_error, name="reader", **reader)
    return files, labels


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """``root/`` (the data root) with two class folders of images and ``outside/`` next to
    it, holding a secret of the same size as ``root/imgs/class_0/img_000.jpg``."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    make_image_folder(root / "imgs", counts=(2, 2))
    outside.mkdir()
    size = (root / "imgs" / "class_0" / "img_000.jpg").stat().st_size
    (outside / "secret.jpg").write_bytes((SECRET * (size // len(SECRET) + 1))[:size])
    (outside / "class_0").mkdir()
    for name in ("img_000.jpg", "img_001.jpg"):  # a decoy folder: same names, same sizes
        real = root / "imgs" / "class_0" / name
        (outside / "class_0" / name).write_bytes(SECRET[:1] * real.stat().st_size)
    return root, outside


def read_all(pipe: Pipeline, batches: int) -> list[bytes]:
    out = []
    for _ in range(batches):
        files, _ = pipe.run()
        out += [bytes(f) for f in files]
    return out


def leaked(data: list[bytes]) -> int:
    return sum(chunk.startswith(SECRET[:7]) or chunk.startswith(SECRET[:1] * 8)
               for chunk in data)


def attempts(root: Path, outside: Path) -> dict[str, dict[str, Any]]:
    """Reader arguments that each try to read outside the root."""
    imgs = root / "imgs"
    os.symlink(outside / "secret.jpg", imgs / "class_1" / "link-out.jpg")
    os.symlink(outside, imgs / "folder-out")
    os.symlink(imgs / "class_1" / "link-out.jpg", imgs / "chain.jpg")  # link -> link -> out
    os.symlink("../../outside/secret.jpg", imgs / "relative-out.jpg")
    (imgs / "list-dots.txt").write_text("class_0/img_000.jpg 0\n../../outside/secret.jpg 1\n")
    (imgs / "list-abs.txt").write_text(f"{outside / 'secret.jpg'} 0\n")
    (outside / "list.txt").write_text(f"{imgs / 'class_0' / 'img_000.jpg'} 0\n")
    os.symlink(outside / "list.txt", imgs / "list-link.txt")
    return {
        "files with ..": {"file_root": str(imgs), "files": ["../../outside/secret.jpg"]},
        "absolute file": {"files": [str(outside / "secret.jpg")]},
        "/etc/passwd": {"files": ["/etc/passwd"]},
        "file_root outside": {"file_root": str(outside)},
        "file_root ..": {"file_root": str(imgs / ".." / "..")},
        "file_root /": {"file_root": "/"},
        "file symlink out": {"file_root": str(imgs)},
        "folder symlink out": {"file_root": str(imgs / "folder-out")},
        "symlink chain": {"files": [str(imgs / "chain.jpg")]},
        "relative symlink": {"files": [str(imgs / "relative-out.jpg")]},
        "file_list entry with ..": {"file_list": str(imgs / "list-dots.txt")},
        "file_list absolute entry": {"file_list": str(imgs / "list-abs.txt")},
        "file_list symlinked out": {"file_list": str(imgs / "list-link.txt")},
        "file_list outside": {"file_list": str(outside / "list.txt")},
    }


def test_the_traversal_corpus_is_refused_before_anything_is_read(
        tree: tuple[Path, Path]) -> None:
    root, outside = tree
    corpus = attempts(root, outside)
    refused, escapes = [], []
    for what, reader in corpus.items():
        try:
            with Pipeline(raw(**reader), data_roots=[root]) as pipe:
                escapes += [what] if leaked(read_all(pipe, 2)) else []
        except errors.PermissionDenied as exc:
            assert "is outside the data roots" in exc.message, (what, exc.message)
            assert str(root) not in exc.message, (what, exc.message)  # nor the roots' list
            refused.append(what)
    assert escapes == []
    assert refused == list(corpus)


def swap(victim: Path, target: Path) -> None:
    """Replace ``victim`` by a symlink to ``target`` in one rename."""
    link = victim.with_name(victim.name + ".new")
    os.symlink(target, link)
    os.replace(link, victim)


def test_a_file_swapped_for_a_symlink_after_the_build_is_refused(
        tree: tuple[Path, Path]) -> None:
    root, outside = tree
    imgs = root / "imgs"
    victim = imgs / "class_0" / "img_000.jpg"
    original = victim.read_bytes()
    with Pipeline(raw(file_root=str(imgs)), data_roots=[root]) as pipe:
        swap(victim, outside / "secret.jpg")  # same size: only the symlink rule stops it
        with pytest.raises(errors.DataFileError, match=r"cannot read '<root 0>/imgs/class_0/"
                                                       r"img_000\.jpg': a symbolic link"):
            pipe.run()
    with pytest.raises(errors.PermissionDenied):  # built with the symlink there: refused
        Pipeline(raw(file_root=str(imgs)), data_roots=[root])
    victim.unlink()
    victim.write_bytes(original)
    with Pipeline(raw(on_error="skip", file_root=str(imgs)), data_roots=[root]) as pipe:
        swap(victim, outside / "secret.jpg")
        data = read_all(pipe, 2)
        assert len(data) == 3 and pipe.samples_skipped == 1 and leaked(data) == 0


def test_a_folder_swapped_for_a_symlink_after_the_build_is_refused(
        tree: tuple[Path, Path]) -> None:
    root, outside = tree
    imgs = root / "imgs"
    files = ["class_0/img_000.jpg", "class_1/img_000.jpg", "class_0/img_001.jpg",
             "class_1/img_001.jpg"]
    with Pipeline(raw(on_error="skip", file_root=str(imgs), files=files),
                  data_roots=[root]) as pipe:
        shutil.rmtree(imgs / "class_0")
        swap(imgs / "class_0", outside / "class_0")  # same names, same sizes
        data = read_all(pipe, 2)
        assert len(data) == 2 and pipe.samples_skipped == 2 and leaked(data) == 0


def test_a_symlink_inside_is_resolved_once_when_the_pipeline_is_built(
        tree: tuple[Path, Path]) -> None:
    root, outside = tree
    imgs = root / "imgs"
    target = imgs / "class_1" / "img_000.jpg"
    alias = imgs / "class_0" / "alias.jpg"
    os.symlink(target, alias)
    [entry] = resolve({"files": [str(alias)]}, [root])
    assert (entry.path, entry.root, entry.relative) == (str(alias), 0, "imgs/class_1/img_000.jpg")
    with Pipeline(raw(files=[str(alias)]), data_roots=[root]) as pipe:
        swap(alias, outside / "secret.jpg")  # re-pointed outside after the build
        files, _ = pipe.run()
        assert bytes(files[0]) == target.read_bytes()  # still the target it was built with


def test_folder_symlink_cycles_are_skipped_with_a_log_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = make_image_folder(tmp_path / "root", counts=(2, 1))
    os.symlink("..", root / "class_0" / "up")  # to the root: every class again
    os.symlink(".", root / "class_0" / "self")
    (root / "class_1" / "deep").mkdir()
    os.symlink("../..", root / "class_1" / "deep" / "loop")
    os.symlink(root, root / "class_2")  # a class folder that is the root itself
    (root / "class_0" / "sibling").mkdir()  # not a cycle: a real folder below
    (root / "class_0" / "sibling" / "x.jpg").write_bytes(b"x")
    with caplog.at_level(logging.WARNING, logger="conveyor.engine"):
        entries = resolve({"file_root": str(root)}, [tmp_path])
    names = [os.path.relpath(e.path, root) for e in entries]
    assert names == ["class_0/img_000.jpg", "class_0/img_001.jpg", "class_0/sibling/x.jpg",
                     "class_1/img_000.jpg"]
    skipped = sorted(r.getMessage().split(" (")[0].split("skipped ")[1] for r in caplog.records)
    assert skipped == sorted(str(p) for p in (root / "class_0" / "self", root / "class_0" / "up",
                                              root / "class_1" / "deep" / "loop",
                                              root / "class_2"))
    assert all("a symlink to a folder above it" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("name", ["a\nb.jpg", "a\0b.jpg", "a\rb.jpg", "a\u2028b.jpg"])
def test_names_a_listing_cannot_hold_are_refused(tmp_path: Path, name: str) -> None:
    root = make_image_folder(tmp_path / "root", counts=(1,))
    with pytest.raises(errors.SpecError, match=r"readers\.file: argument 'files': entry 1 .* "
                                               "NUL byte or a line break"):
        resolve({"file_root": str(root), "files": ["class_0/img_000.jpg", name]}, [tmp_path])
    if "\0" not in name:  # the file system holds the others: a scanned root refuses them
        (root / "class_0" / name).write_bytes(b"x")
        with pytest.raises(errors.InvalidArgument, match=r"'<root 0>/root/class_0/a.+b\.jpg' "
                                                         "has a NUL byte or a line break"):
            resolve({"file_root": str(root)}, [tmp_path])


def test_a_root_or_list_with_a_nul_byte_is_a_spec_error(tmp_path: Path) -> None:
    for argument in ("file_root", "file_list"):
        with pytest.raises(errors.SpecError, match=f"argument '{argument}': .* a NUL byte"):
            resolve({argument: str(tmp_path / "a\0b")}, [tmp_path])


def test_a_name_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    root = make_image_folder(tmp_path / "root", counts=(1,))
    os.close(os.open(os.fsencode(root / "class_0") + b"/bad\xff.jpg", os.O_CREAT | os.O_WRONLY))
    with pytest.raises(errors.InvalidArgument, match="not UTF-8"):
        resolve({"file_root": str(root)}, [tmp_path])


def test_a_file_above_max_file_bytes_is_refused_before_it_is_read(tmp_path: Path) -> None:
    root = make_image_folder(tmp_path / "root", counts=(4,))
    big = root / "class_0" / "img_002.jpg"
    big.write_bytes(big.read_bytes() + bytes(5000))
    limits = EngineLimits(max_file_bytes=4000)
    with Pipeline(raw(file_root=str(root)), data_roots=[tmp_path], limits=limits) as pipe:
        pipe.run()
        with pytest.raises(errors.ResourceExhausted,
                           match=r"readers\.file: '<root 0>/root/class_0/img_002\.jpg' is "
                                 r"[\d,]+ bytes, above the server's limit "
                                 r"limits\.max_file_bytes = 4,000; it was not read"):
            pipe.run()
    with Pipeline(raw(on_error="skip", file_root=str(root)), data_roots=[tmp_path],
                  limits=limits) as pipe:
        assert [len(pipe.run()[0]) for _ in range(2)] == [2, 1]


def test_a_read_is_bounded_whatever_the_file_does() -> None:
    reader, writer = os.pipe()
    chunk = b"z" * 65536
    stop = threading.Event()

    def flood() -> None:  # a "file" that never ends
        try:
            while not stop.is_set():
                os.write(writer, chunk)
        except OSError:
            pass
    thread = threading.Thread(target=flood, daemon=True)
    thread.start()
    try:
        assert read_at_most(reader, 1001).size == 1001
    finally:
        stop.set()
        os.close(reader)
        thread.join(5)
        os.close(writer)


def test_a_fifo_in_the_root_is_refused_without_blocking(tmp_path: Path) -> None:
    root = make_image_folder(tmp_path / "root", counts=(2,))
    fifo = root / "class_0" / "img_001.jpg"
    with Pipeline(raw(on_error="skip", file_root=str(root)), data_roots=[tmp_path]) as pipe:
        fifo.unlink()
        os.mkfifo(fifo)  # after the listing, in a listed file's place
        started = time.monotonic()
        files, _ = pipe.run()
        assert len(files) == 1 and pipe.samples_skipped == 1
        assert time.monotonic() - started < 10


def test_reading_many_files_beneath_a_root_gives_the_same_bytes(tmp_path: Path) -> None:
    root = make_image_folder(tmp_path / "root", counts=(5, 4))
    with Pipeline(raw(file_root=str(root)), data_roots=[tmp_path]) as confined, \
            Pipeline(raw(file_root=str(root))) as free:
        got, expected = read_all(confined, 5), read_all(free, 5)
    assert got == expected and len(got) == 10
    assert all(np.frombuffer(g, np.uint8)[:2].tolist() == [0xFF, 0xD8] for g in got)
