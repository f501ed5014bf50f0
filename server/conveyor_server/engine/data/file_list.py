"""Resolve a file reader's list of (path, size, modification time, label) and check it
against the data roots (``data_identity.py`` digests it for checkpoints).

Each file's real path must lie beneath a data root (``data_roots.py``); the entry keeps
that root and the path relative to it, which is what a read opens, so a symlink inside the
root is followed once, here. A folder symlink that leads back to a folder above it (a
cycle) is skipped with a warning in the log: everything below it is listed already. A name
with a NUL byte or a line break, or one that is not UTF-8, is refused: a listing is lines.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from conveyor.errors import DataFileError, InvalidArgument, SpecError
from conveyor_server.engine.data.entries import FileEntry, file_list_lines, unfit_name
from conveyor_server.engine.data.object_list import resolve_objects, uses_objects
from conveyor_server.engine.data.object_store import ObjectStores
from conveyor_server.engine.data.roots import DataRoots, RealPaths, not_a_folder

__all__ = ["IMAGE_EXTENSIONS", "FileEntry", "check_inside_roots", "data_roots", "display",
           "resolve", "unfit_name"]

log = logging.getLogger("conveyor.engine")

#: Extensions read from a ``file_root`` when no ``file_filters`` are given (case-insensitive).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".pgm", ".ppm", ".pbm", ".pnm",
                    ".bmp", ".tif", ".tiff", ".jp2", ".webp")

OP = "readers.file"


Roots = Sequence[str | Path] | DataRoots | None

def data_roots(roots: Roots) -> DataRoots | None:
    """``roots`` resolved (once) as ``DataRoots``; None allows any path."""
    if roots is None or isinstance(roots, DataRoots):
        return roots
    return DataRoots(roots)


def check_inside_roots(path: str | Path, roots: Roots, what: str) -> Path:
    """The real path of ``path``; PermissionDenied if it lies outside every data root
    (``..`` and symlinks are resolved first). ``roots=None`` allows any path."""
    real = os.path.realpath(path)
    resolved = data_roots(roots)
    if resolved is not None:
        resolved.check(path, real, what)
    return Path(real)


def display(roots: DataRoots | None, path: str | Path) -> str:
    """``path`` as messages name it (relative to its root where there are roots)."""
    return str(path) if roots is None else roots.name(path)


def _name_filter(filters: Sequence[str], case_sensitive: bool) -> Callable[[str], bool]:
    """Whether a file name matches any of the shell patterns ``filters``: one regex."""
    if not case_sensitive:
        filters = [f.lower() for f in filters]
    match = re.compile("|".join(fnmatch.translate(f) for f in filters)).match
    if case_sensitive:
        return lambda name: match(name) is not None
    return lambda name: match(name.lower()) is not None


def _folder_id(path: str | Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _skip_cycle(path: str, roots: DataRoots | None) -> None:
    log.warning("%s: skipped %s (%s): a symlink to a folder above it, whose files are listed "
                "already", OP, path, display(roots, path))


def _walk_sorted(directory: Path, above: frozenset[tuple[int, int]],
                 roots: DataRoots | None) -> Iterator[tuple[str, str]]:
    """(folder, file name) below ``directory``, as ``os.walk(followlinks=True)`` gives them
    (a folder's files, then each subfolder's, names sorted), without walking into a folder
    that is its own ancestor (by device and inode; ``above``: the ones above
    ``directory``). The folders are normalized (they come from a normalized
    ``directory``), so ``os.path.join(folder, name)`` is the string ``Path(folder) / name``
    would give."""
    start = _folder_id(directory)
    if start is None:
        return
    if start in above:
        _skip_cycle(str(directory), roots)
        return
    pending = [(str(directory), above | {start})]
    while pending:
        top, ancestors = pending.pop()
        try:
            with os.scandir(top) as listing:
                entries = list(listing)
        except OSError:
            continue  # as os.walk: a folder that cannot be listed is left out
        folders: list[str] = []
        files: list[str] = []
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            (folders if is_dir else files).append(entry.name)
        for name in sorted(files):
            yield top, name
        below = []
        for name in sorted(folders):
            path = os.path.join(top, name)
            folder = _folder_id(path)
            if folder is None:
                continue
            if folder in ancestors:
                _skip_cycle(path, roots)
                continue
            below.append((path, ancestors | {folder}))
        pending.extend(reversed(below))


class _FileCheck:
    """Checks many files against the data roots and reads their sizes: one ``lstat`` per
    file, each directory's real path resolved once (``RealPaths``), so the check is the one
    ``check_inside_roots`` makes, without resolving every component of every file again."""

    def __init__(self, roots: DataRoots | None) -> None:
        self._roots = roots
        self._real_paths = RealPaths()

    def _check(self, path: str, real: str) -> tuple[int, str]:
        if self._roots is None:
            return -1, ""
        return self._roots.check(path, real, "file")

    def stat(self, path: str) -> tuple[os.stat_result, int, str]:
        """The stat of ``path`` (its target's for a link), and the root it lies beneath with
        its real path relative to that root; PermissionDenied if it lies outside the data
        roots (checked first, also for a file that does not exist), DataFileError if it
        cannot be read."""
        try:
            st = os.lstat(path)
        except OSError as exc:  # resolved in full: a path the kernel cannot follow may
            self._check(path, os.path.realpath(path))  # still name a place outside
            raise DataFileError(f"{OP}: cannot read {display(self._roots, path)!r}: "
                                f"{exc.strerror}") from None
        link = stat.S_ISLNK(st.st_mode)
        real = self._real_paths.of(path, link)
        root, relative = self._check(path, real)
        if link:
            try:
                st = os.stat(real)
            except OSError as exc:
                raise DataFileError(f"{OP}: cannot read {display(self._roots, path)!r}: "
                                    f"{exc.strerror}") from None
        return st, root, relative


def resolve(args: Mapping[str, Any], roots: Roots = None,
            objects: ObjectStores | None = None) -> list[FileEntry]:
    """The reader's files in reading order (before sharding and shuffling): files, or
    objects when the arguments are object URLs (``s3://``, ``gs://``, ``az://``:
    ``object_list.py``; ``objects``: the
    server's clients, by default ones configured by the environment alone)."""
    resolved = data_roots(roots)
    file_root = args.get("file_root") or ""
    file_list = args.get("file_list") or ""
    files = args.get("files")
    labels = args.get("labels")
    given = [n for n, v in (("file_root", file_root), ("file_list", file_list),
                            ("files", files)) if v]
    if not given:
        raise SpecError(OP, "file_root", "one of file_root, file_list or files is required")
    if file_list and files:
        raise SpecError(OP, "files", "file_list and files cannot be used together")
    if labels and not files:
        raise SpecError(OP, "labels", "labels needs files")
    for argument, value in (("file_root", file_root), ("file_list", file_list)):
        if why := unfit_name(value):
            raise SpecError(OP, argument, f"{value!r} {why}")
    if labels is not None and files and len(labels) != len(files):
        raise SpecError(OP, "labels", f"has {len(labels)} entries for {len(files)} files")
    if uses_objects(file_root, file_list, files):
        return resolve_objects(file_root, file_list, files, labels, _wanted(args), resolved,
                               objects or ObjectStores())
    root = check_inside_roots(file_root, resolved, "file_root") if file_root else None

    pairs: Sequence[tuple[str | Path, int]]
    if file_list:
        pairs = _read_file_list(Path(file_list), root, resolved)
    elif files:
        if labels is not None and len(labels) != len(files):
            raise SpecError(OP, "labels", f"has {len(labels)} entries for {len(files)} files")
        for i, f in enumerate(files):
            if why := unfit_name(f):
                raise SpecError(OP, "files", f"entry {i} {f!r} {why}")
        base = root or Path()
        pairs = [(base / f, labels[i] if labels else i) for i, f in enumerate(files)]
    else:
        assert root is not None
        pairs = _scan_root(root, args, resolved)
    if not pairs:
        where = "files" if files else display(resolved, file_list or file_root)
        raise InvalidArgument(f"{OP}: no files found in {where!r}")
    files_check = _FileCheck(resolved)
    entries = []
    for path, label in pairs:
        text = str(path)
        if why := unfit_name(text):
            shown = display(resolved, text.replace("\0", "\\0"))
            raise InvalidArgument(f"{OP}: file {shown!r} {why}: rename it")
        st, index, relative = files_check.stat(text)
        entries.append(FileEntry(text, st.st_size, int(label), st.st_mtime_ns, index, relative))
    return entries


def _scan_root(root: Path, args: Mapping[str, Any],
               roots: DataRoots | None) -> list[tuple[str, int]]:
    if not root.is_dir():
        raise not_a_folder(OP, "file_root", display(roots, root), str(root))
    wanted = _wanted(args)
    classes = sorted(d for d in os.listdir(root) if (root / d).is_dir())
    above = frozenset(f for f in (_folder_id(root),) if f is not None)
    return [(os.path.join(folder, name), label)
            for label, class_name in enumerate(classes)
            for folder, name in _walk_sorted(root / class_name, above, roots) if wanted(name)]


def _wanted(args: Mapping[str, Any]) -> Callable[[str], bool]:
    """Whether a file of a ``file_root`` is read, by its name."""
    filters = args.get("file_filters") or tuple("*" + e for e in IMAGE_EXTENSIONS)
    return _name_filter(filters, bool(args.get("case_sensitive_filter")))


def _read_text(real: Path, roots: DataRoots | None) -> str:
    """The text of a file whose real path lies beneath a root, opened beneath it."""
    if roots is None:
        return real.read_text()
    located = roots.locate(str(real))
    assert located is not None, "checked by check_inside_roots"
    with os.fdopen(roots.open(*located), encoding="utf-8") as f:
        return f.read()


def _read_file_list(
    file_list: Path, root: Path | None, roots: DataRoots | None
) -> list[tuple[Path, int]]:
    real = check_inside_roots(file_list, roots, "file_list")
    name = display(roots, file_list)
    try:
        text = _read_text(real, roots)
    except FileNotFoundError:
        raise InvalidArgument(f"{OP}: file_list {name!r} does not exist: check the "
                              "path") from None
    except OSError as exc:
        raise InvalidArgument(f"{OP}: cannot read file_list {name!r}: "
                              f"{exc.strerror}") from None
    except (UnicodeDecodeError, DataFileError) as exc:
        raise InvalidArgument(f"{OP}: cannot read file_list {name!r}: {exc}") from None
    base = root or real.parent
    return [(base / path, label) for _, path, label in file_list_lines(text, name, OP)]
