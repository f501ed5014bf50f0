"""Resolve a file reader's list of (path, size, modification time, label) and check it
against the data roots (``data_identity.py`` digests it for checkpoints)."""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conveyor.errors import DataFileError, InvalidArgument, PermissionDenied, SpecError

#: Extensions read from a ``file_root`` when no ``file_filters`` are given (case-insensitive).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".pgm", ".ppm", ".pbm", ".pnm",
                    ".bmp", ".tif", ".tiff", ".jp2", ".webp")

OP = "readers.file"


@dataclass(frozen=True)
class FileEntry:
    path: str
    size: int
    label: int
    #: Modification time in nanoseconds, as listed.
    mtime_ns: int = 0


class _Roots:
    """The data roots, resolved once, and the one rule: a real path is inside a root if it
    is the root or lies below it."""

    def __init__(self, data_roots: Sequence[Path]) -> None:
        self._given = data_roots
        self._real = [os.path.realpath(r) for r in data_roots]

    def check(self, path: str | Path, real: str, what: str) -> None:
        """PermissionDenied naming ``path`` unless ``real`` (its real path) is inside."""
        for root in self._real:
            if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
                return
        roots = ", ".join(str(r) for r in self._given)
        raise PermissionDenied(f"{OP}: {what} {str(path)!r} is outside the data roots "
                               f"({roots})")


def check_inside_roots(path: str | Path, data_roots: Sequence[Path] | None, what: str) -> Path:
    """The real path of ``path``; PermissionDenied if it lies outside every data root
    (``..`` and symlinks are resolved first). ``data_roots=None`` allows any path."""
    real = os.path.realpath(path)
    if data_roots is not None:
        _Roots(data_roots).check(path, real, what)
    return Path(real)


def _name_filter(filters: Sequence[str], case_sensitive: bool) -> Callable[[str], bool]:
    """Whether a file name matches any of the shell patterns ``filters``: one regex."""
    if not case_sensitive:
        filters = [f.lower() for f in filters]
    match = re.compile("|".join(fnmatch.translate(f) for f in filters)).match
    if case_sensitive:
        return lambda name: match(name) is not None
    return lambda name: match(name.lower()) is not None


def _walk_sorted(directory: Path) -> Iterator[tuple[str, str]]:
    """(folder, file name) below ``directory``, folders and names in sorted order. The
    folders are normalized (they come from a normalized ``directory``), so
    ``os.path.join(folder, name)`` is the string ``Path(folder) / name`` would give."""
    for dirpath, dirnames, filenames in os.walk(directory, followlinks=True):
        dirnames.sort()
        for name in sorted(filenames):
            yield dirpath, name


class _FileCheck:
    """Checks many files against the data roots and reads their sizes: one ``lstat`` per
    file, each directory's real path resolved once. The real path of ``dir/name`` is the
    real path of ``dir`` joined with ``name`` unless ``name`` is a symlink (then it is
    resolved in full), so the check is the one ``check_inside_roots`` makes, without
    resolving every component of every file again."""

    def __init__(self, data_roots: Sequence[Path] | None) -> None:
        self._roots = None if data_roots is None else _Roots(data_roots)
        self._real_dirs: dict[str, str] = {}

    def _real_path(self, path: str, link: bool) -> str:
        head, name = os.path.split(path)
        if link or name in ("", ".", ".."):
            return os.path.realpath(path)
        real_head = self._real_dirs.get(head)
        if real_head is None:
            real_head = self._real_dirs[head] = os.path.realpath(head or os.curdir)
        return os.path.join(real_head, name)

    def _check(self, path: str, real: str) -> None:
        if self._roots is not None:
            self._roots.check(path, real, "file")

    def stat(self, path: str) -> os.stat_result:
        """The stat of ``path`` (its target's for a link); PermissionDenied if it lies
        outside the data roots (checked first, also for a file that does not exist),
        DataFileError if it cannot be read."""
        try:
            st = os.lstat(path)
        except OSError as exc:  # resolved in full: a path the kernel cannot follow may
            self._check(path, os.path.realpath(path))  # still name a place outside
            raise DataFileError(f"{OP}: cannot read {path!r}: {exc.strerror}") from None
        link = stat.S_ISLNK(st.st_mode)
        real = self._real_path(path, link)
        self._check(path, real)
        if link:
            try:
                st = os.stat(real)
            except OSError as exc:
                raise DataFileError(f"{OP}: cannot read {path!r}: {exc.strerror}") from None
        return st


def resolve(args: Mapping[str, Any], data_roots: Sequence[Path] | None = None) -> list[FileEntry]:
    """The reader's files in reading order (before sharding and shuffling)."""
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
    root = check_inside_roots(file_root, data_roots, "file_root") if file_root else None

    pairs: Sequence[tuple[str | Path, int]]
    if file_list:
        pairs = _read_file_list(Path(file_list), root, data_roots)
    elif files:
        if labels is not None and len(labels) != len(files):
            raise SpecError(OP, "labels", f"has {len(labels)} entries for {len(files)} files")
        base = root or Path()
        pairs = [(base / f, labels[i] if labels else i) for i, f in enumerate(files)]
    else:
        assert root is not None
        pairs = _scan_root(root, args)
    if not pairs:
        where = file_list or file_root or "files"
        raise InvalidArgument(f"{OP}: no files found in {where!r}")
    files_check = _FileCheck(data_roots)
    entries = []
    for path, label in pairs:
        st = files_check.stat(str(path))
        entries.append(FileEntry(str(path), st.st_size, int(label), st.st_mtime_ns))
    return entries


def _scan_root(root: Path, args: Mapping[str, Any]) -> list[tuple[str, int]]:
    if not root.is_dir():
        raise InvalidArgument(f"{OP}: file_root {str(root)!r} is not a directory")
    filters = args.get("file_filters") or tuple("*" + e for e in IMAGE_EXTENSIONS)
    wanted = _name_filter(filters, bool(args.get("case_sensitive_filter")))
    classes = sorted(d for d in os.listdir(root) if (root / d).is_dir())
    return [(os.path.join(folder, name), label)
            for label, class_name in enumerate(classes)
            for folder, name in _walk_sorted(root / class_name) if wanted(name)]


def _read_file_list(
    file_list: Path, root: Path | None, data_roots: Sequence[Path] | None
) -> list[tuple[Path, int]]:
    real = check_inside_roots(file_list, data_roots, "file_list")
    try:
        text = real.read_text()
    except OSError as exc:
        raise InvalidArgument(f"{OP}: cannot read file_list {str(file_list)!r}: "
                              f"{exc.strerror}") from None
    base = root or real.parent
    pairs = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        parts = line.rsplit(maxsplit=1)
        try:
            label = int(parts[1]) if len(parts) == 2 else -1
        except ValueError:
            label = -1
        if label < 0:
            raise InvalidArgument(f"{OP}: file_list {str(file_list)!r} line {number}: expected "
                                  f"'path label' with an integer label >= 0, got {line!r}")
        pairs.append((base / parts[0], label))
    return pairs
