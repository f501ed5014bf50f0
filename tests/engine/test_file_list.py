"""A reader's files are checked one by one against the data roots: symlinks and ``..``
resolved, PERMISSION_DENIED before anything is read, DATA_LOSS for what cannot be read."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pytest

from conveyor.errors import ConveyorError, DataFileError, PermissionDenied
from conveyor_server.engine.data.file_list import (
    IMAGE_EXTENSIONS,
    FileEntry,
    check_inside_roots,
    resolve,
)


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """``data/`` (the root) with class folders, and ``outside/`` next to it; symlinks of
    every kind: a file and a folder inside pointing inside, outside, and nowhere."""
    root, outside = tmp_path / "data", tmp_path / "outside"
    for folder in (root / "a", root / "b" / "deep", outside, tmp_path / "data-private"):
        folder.mkdir(parents=True)
    (tmp_path / "data-private" / "p.jpg").write_bytes(b"p")  # its name starts like the root's
    (root / "a" / "one.jpg").write_bytes(b"1" * 11)
    (root / "b" / "deep" / "two.jpg").write_bytes(b"2" * 22)
    (outside / "secret.jpg").write_bytes(b"s" * 33)
    os.symlink(root / "b" / "deep" / "two.jpg", root / "a" / "alias.jpg")
    os.symlink(outside / "secret.jpg", root / "a" / "escape.jpg")
    os.symlink(root / "a" / "gone.jpg", root / "a" / "dangling.jpg")
    os.symlink(outside, root / "b" / "portal")
    return root, outside


def reference(path: Path, roots: list[Path]) -> int | type[ConveyorError]:
    """What one file's check must give: the real path inside a root, then its size."""
    try:
        real = check_inside_roots(path, roots, "file")
    except PermissionDenied:
        return PermissionDenied
    try:
        return real.stat().st_size
    except OSError:
        return DataFileError


def outcome(path: Path, roots: list[Path]) -> int | type[ConveyorError]:
    try:
        [entry] = resolve({"files": [str(path)]}, roots)
    except (PermissionDenied, DataFileError) as exc:
        return type(exc)
    return entry.size


def test_every_kind_of_path_gets_the_outcome_of_a_full_resolution(
        tree: tuple[Path, Path]) -> None:
    root, outside = tree
    paths = [root / "a" / "one.jpg", root / "a" / "alias.jpg", root / "a" / "escape.jpg",
             root / "a" / "dangling.jpg", root / "a" / "missing.jpg",
             root / "b" / "portal" / "secret.jpg", root / "b" / "portal" / "missing.jpg",
             root / "b" / "deep" / ".." / "deep" / "two.jpg",
             root / "b" / ".." / ".." / "outside" / "secret.jpg",
             root / "b" / "deep" / "..", outside / "secret.jpg", outside / "missing.jpg",
             root.parent / "data-private" / "p.jpg"]
    got = {str(p): outcome(p, [root]) for p in paths}
    assert got == {str(p): reference(p, [root]) for p in paths}
    # And what that is, spelled out for the cases that matter:
    assert got[str(root / "a" / "alias.jpg")] == 22  # a symlink inside: its target's size
    for escaping in (root / "a" / "escape.jpg", root / "b" / "portal" / "secret.jpg",
                     root / "b" / ".." / ".." / "outside" / "secret.jpg",
                     outside / "missing.jpg", root.parent / "data-private" / "p.jpg"):
        assert got[str(escaping)] is PermissionDenied, escaping
    assert got[str(root / "a" / "missing.jpg")] is DataFileError
    assert got[str(root / "a" / "dangling.jpg")] is DataFileError


def test_a_scanned_root_refuses_a_symlinked_file_or_folder_leading_outside(
        tree: tuple[Path, Path]) -> None:
    root, outside = tree
    # The first problem in reading order is reported: a/dangling.jpg, then a/escape.jpg.
    with pytest.raises(DataFileError, match=r"cannot read .*dangling\.jpg"):
        resolve({"file_root": str(root)}, [root])
    (root / "a" / "dangling.jpg").unlink()
    with pytest.raises(PermissionDenied, match=r"escape\.jpg.* is outside the data roots"):
        resolve({"file_root": str(root)}, [root])
    (root / "a" / "escape.jpg").unlink()
    with pytest.raises(PermissionDenied, match=r"portal/secret\.jpg.* outside the data roots"):
        resolve({"file_root": str(root)}, [root])
    # The same tree is fine when the outside folder is a data root too.
    entries = resolve({"file_root": str(root)}, [root, outside])
    assert [(Path(e.path).name, e.size, e.label) for e in entries] == [
        ("alias.jpg", 22, 0), ("one.jpg", 11, 0), ("two.jpg", 22, 1), ("secret.jpg", 33, 1)]


def test_a_file_list_entry_outside_is_refused_even_if_it_does_not_exist(
        tree: tuple[Path, Path]) -> None:
    root, _ = tree
    listing = root / "list.txt"
    listing.write_text("a/one.jpg 0\n../outside/nothing.jpg 1\n")
    with pytest.raises(PermissionDenied, match=r"nothing\.jpg"):
        resolve({"file_list": str(listing)}, [root])
    listing.write_text("a/one.jpg 0\nb/deep/two.jpg 3\n")
    one, two = root / "a" / "one.jpg", root / "b" / "deep" / "two.jpg"
    assert resolve({"file_list": str(listing)}, [root]) == [
        FileEntry(str(one), 11, 0, one.stat().st_mtime_ns),
        FileEntry(str(two), 22, 3, two.stat().st_mtime_ns)]


def test_without_data_roots_any_readable_file_is_taken(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    [entry] = resolve({"files": [str(root / "a" / "escape.jpg")]}, None)
    assert entry.size == 33
    with pytest.raises(DataFileError, match=r"missing\.jpg"):
        resolve({"files": [str(root / "missing.jpg")]}, None)


def pathlib_listing(root: Path, filters: list[str], case_sensitive: bool) -> list[tuple[str, int]]:
    """A scanned root as pathlib spells it: every entry's path string is part of the data
    set's digest in checkpoints, so the listing must not change, not even in spelling."""
    def matches(name: str) -> bool:
        if not case_sensitive:
            return any(fnmatch.fnmatchcase(name.lower(), f.lower()) for f in filters)
        return any(fnmatch.fnmatchcase(name, f) for f in filters)
    out = []
    classes = sorted(d.name for d in root.iterdir() if d.is_dir())
    for label, name in enumerate(classes):
        for folder, dirnames, filenames in os.walk(root / name, followlinks=True):
            dirnames.sort()
            out += [(str(Path(folder) / f), label) for f in sorted(filenames) if matches(f)]
    return out


@pytest.mark.parametrize(("filters", "case_sensitive"), [
    (None, False), (["*.JPG", "img_?.png"], False), (["*.JPG", "img_?.png"], True)])
def test_a_scanned_root_lists_exactly_what_pathlib_lists(
        tmp_path: Path, filters: list[str] | None, case_sensitive: bool) -> None:
    root = tmp_path / "set"
    names = ["b.jpg", "A.JPG", "c.Jpeg", "img_1.png", "img_10.png", "notes.txt", "x.jpg.bak"]
    for folder in ("cat", "cat/inner/deeper", "cat/z", "dog", "ant", "empty"):
        (root / folder).mkdir(parents=True, exist_ok=True)
        if folder != "empty":
            for n in names:
                (root / folder / n).write_bytes(b"x")
    args: dict[str, object] = {"file_root": str(root), "case_sensitive_filter": case_sensitive}
    if filters:
        args["file_filters"] = filters
    got = [(e.path, e.label) for e in resolve(args, [tmp_path])]
    default = ["*" + e for e in IMAGE_EXTENSIONS]
    assert got == pathlib_listing(root, filters or default, case_sensitive)
    assert len(got) >= 10  # the comparison is over a real listing, not two empty ones


def test_the_roots_rule_for_every_spelling_of_a_root(
        tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    root, outside = tree
    one = str(root / "a" / "one.jpg")
    secret = str(outside / "secret.jpg")

    def allowed(path: str, roots: list[Path]) -> bool:
        try:
            resolve({"files": [path]}, roots)
        except PermissionDenied:
            return False
        return True

    assert allowed(secret, [Path("/")])  # the file system's root holds everything
    assert allowed(one, [Path(str(root) + "/")]) and not allowed(secret, [Path(str(root) + "/")])
    linked_root = root.parent / "data-link"
    os.symlink(root, linked_root)  # a root that is a symlink: what it points to
    assert allowed(one, [linked_root]) and allowed(str(linked_root / "a" / "one.jpg"), [root])
    assert not allowed(secret, [linked_root])
    monkeypatch.chdir(root.parent)  # relative roots and paths
    assert allowed("data/a/one.jpg", [Path("data")])
    assert not allowed("outside/secret.jpg", [Path("data")])
    assert not allowed("data/../outside/secret.jpg", [Path("data")])
    # A path equal to a root is inside it; its parent is not.
    assert check_inside_roots(root, [root], "file_root") == Path(os.path.realpath(root))
    with pytest.raises(PermissionDenied, match="file_root"):
        check_inside_roots(root.parent, [root], "file_root")


def test_a_missing_file_behind_a_relative_link_and_dots_is_refused_not_read(
        tree: tuple[Path, Path]) -> None:
    root, outside = tree
    (outside / "sub").mkdir()
    os.symlink("../../outside/sub", root / "b" / "rel")  # a relative link leading outside
    # The kernel resolves rel/.. to outside/, where 'lost.jpg' does not exist: the path
    # names a place outside the root, so the answer is PERMISSION_DENIED, not DATA_LOSS.
    with pytest.raises(PermissionDenied):
        resolve({"files": [str(root / "b" / "rel" / ".." / "lost.jpg")]}, [root])
