"""Resolve a file reader's list of (path, size, label), check it against the data roots,
and digest it so a checkpoint can tell whether the data set changed."""

from __future__ import annotations

import fnmatch
import hashlib
import os
from collections.abc import Mapping, Sequence
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


def check_inside_roots(path: str | Path, data_roots: Sequence[Path] | None, what: str) -> Path:
    """The real path of ``path``; PermissionDenied if it lies outside every data root
    (``..`` and symlinks are resolved first). ``data_roots=None`` allows any path."""
    real = Path(os.path.realpath(path))
    if data_roots is None:
        return real
    for root in data_roots:
        real_root = Path(os.path.realpath(root))
        if real == real_root or real_root in real.parents:
            return real
    roots = ", ".join(str(r) for r in data_roots)
    raise PermissionDenied(f"{OP}: {what} {str(path)!r} is outside the data roots ({roots})")


def _matches(name: str, filters: Sequence[str], case_sensitive: bool) -> bool:
    if not case_sensitive:
        name = name.lower()
        filters = [f.lower() for f in filters]
    return any(fnmatch.fnmatchcase(name, f) for f in filters)


def _walk_sorted(directory: Path) -> list[Path]:
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(directory, followlinks=True):
        dirnames.sort()
        found.extend(Path(dirpath) / f for f in sorted(filenames))
    return found


def _stat(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError as exc:
        raise DataFileError(f"{OP}: cannot read {str(path)!r}: {exc.strerror}") from None


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

    pairs: list[tuple[Path, int]]
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
    entries = []
    for path, label in pairs:
        real = check_inside_roots(path, data_roots, "file")
        entries.append(FileEntry(str(path), _stat(real), int(label)))
    return entries


def _scan_root(root: Path, args: Mapping[str, Any]) -> list[tuple[Path, int]]:
    if not root.is_dir():
        raise InvalidArgument(f"{OP}: file_root {str(root)!r} is not a directory")
    filters = args.get("file_filters") or tuple("*" + e for e in IMAGE_EXTENSIONS)
    case_sensitive = bool(args.get("case_sensitive_filter"))
    classes = sorted(d for d in os.listdir(root) if (root / d).is_dir())
    pairs = []
    for label, name in enumerate(classes):
        for path in _walk_sorted(root / name):
            if _matches(path.name, filters, case_sensitive):
                pairs.append((path, label))
    return pairs


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


def digest(entries: Sequence[FileEntry]) -> bytes:
    """SHA-256 over every (path, size, label), in order."""
    h = hashlib.sha256()
    for e in entries:
        h.update(f"{e.path}\0{e.size}\0{e.label}\n".encode())
    return h.digest()
