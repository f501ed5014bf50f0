"""The data roots a server's pipelines may read: resolved once, the rule for what lies
beneath them, opening a file beneath its root, and naming paths without revealing them.

**Beneath.** A real path (symlinks and ``..`` resolved) is inside a root if it is the root
or lies below it. A pipeline's files are resolved when it is built; each keeps its root's
index and its path relative to the root's real directory (a symlink inside the root that
points inside is resolved then: the file read is its target).

**Opening.** A read starts from the root's real directory (a pipeline's reads from its
directory opened once: ``root_handles.py``) and walks down one component at a time
(``open_below``), each opened relative to the folder before with ``O_NOFOLLOW`` (and
``O_DIRECTORY`` for folders); a batch's reads ask the kernel for the same in one call
(``openat2``: ``batch_read.c``). So a symlink swapped in after the pipeline was built, for
the file or for any folder above it, is refused (the kernel answers ``ELOOP`` or
``ENOTDIR``) instead of being followed out of the root; no check precedes the open, so there
is no window between a check and the open. Only regular files are read (a FIFO would block,
a device never end). The roots themselves are the operator's: the path of each is resolved
once, when the pipeline is built.

**Object roots.** A root may be an object store prefix (``s3://bucket/prefix``, and as
well ``gs://`` and ``az://``): a URL
is beneath it when it continues the root's key (``object_urls.py``); its objects are
listed and read by ``object_list.py`` and ``files.py``.

**Naming.** Errors go to clients, who need not learn where the roots lie: a file is named
``<root N>/relative/path`` (N: the root's index in ``data_roots``; the server logs the
roots at start), and a path outside every root as the caller spelled it, normalized.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from conveyor.errors import DataFileError, InvalidArgument, PermissionDenied
from conveyor_server.engine.data.object_urls import ObjectUrl, is_object_url, parse_object_url

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused after the fstat).
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def root_label(index: int) -> str:
    return f"<root {index}>"


def outside_roots(op: str, what: str, name: str) -> PermissionDenied:
    """The refusal of a path that lies outside every data root, with what to do. Whether
    such a path exists is never said (no probing of the server's other files)."""
    return PermissionDenied(
        f"{op}: {what} {name!r} is outside the data roots, the only folders this server "
        "reads: check the path for a typo (a relative path is resolved in the server's "
        "working directory), or make a folder above it a data root (the server's "
        "--data-root, data_roots in its configuration)")


def not_a_folder(op: str, what: str, name: str, real: str) -> InvalidArgument:
    """The refusal of a folder argument beneath the roots that is no folder: it does not
    exist (mistyped?) or is something else."""
    if not os.path.lexists(real):
        return InvalidArgument(f"{op}: {what} {name!r} does not exist: check the path")
    return InvalidArgument(f"{op}: {what} {name!r} is not a directory")


def outside_object_roots(op: str, what: str, url: str) -> PermissionDenied:
    """The refusal of an object URL that lies below no object root (the example root is
    spelled with the URL's own scheme)."""
    scheme = url.split("://", 1)[0] if "://" in url else "s3"
    bucket = "CONTAINER" if scheme == "az" else "BUCKET"
    return PermissionDenied(
        f"{op}: {what} {url!r} is outside the data roots, the only places this server "
        f"reads: check the {bucket.lower()} and key for a typo, or make a prefix above it a "
        f"data root (the server's --data-root {scheme}://{bucket}/PREFIX, data_roots in its "
        "configuration)")


class DataRoots:
    def __init__(self, roots: Sequence[str | Path]) -> None:
        #: Each object root (None for a folder), by index.
        self.objects: list[ObjectUrl | None] = [
            parse_object_url(str(r), "data root") if is_object_url(str(r)) else None
            for r in roots]
        #: Each root as configured, made absolute (how paths given to pipelines spell it);
        #: an object root as its URL.
        self.given = [str(o) if o is not None else os.path.normpath(os.path.abspath(r))
                      for r, o in zip(roots, self.objects, strict=True)]
        #: Each root's real directory, resolved once (an object root's URL).
        self.real = [str(o) if o is not None else os.path.realpath(r)
                     for r, o in zip(roots, self.objects, strict=True)]

    def locate_object(self, url: ObjectUrl) -> tuple[int, str] | None:
        """(root index, key relative to that root) of an object URL, or None if it lies
        below no object root."""
        for index, root in enumerate(self.objects):
            if root is not None and (relative := url.relative_to(root)) is not None:
                return index, relative
        return None

    def object_root(self, index: int) -> ObjectUrl | None:
        return self.objects[index] if index >= 0 else None

    def locate(self, real: str) -> tuple[int, str] | None:
        """(root index, path relative to that root) of a real path, or None if it lies
        outside every root ("" for a root itself)."""
        for index, root in enumerate(self.real):
            if self.objects[index] is not None:
                continue
            if real == root:
                return index, ""
            prefix = root.rstrip(os.sep) + os.sep
            if real.startswith(prefix):
                return index, real[len(prefix):]
        return None

    def check(self, path: str | Path, real: str, what: str) -> tuple[int, str]:
        """Where ``real`` (the real path of ``path``) lies beneath a root; PermissionDenied
        naming ``path`` if it lies outside them all."""
        found = self.locate(real)
        if found is None:
            raise outside_roots("readers.file", what, self.name(path))
        return found

    def name(self, path: str | Path) -> str:
        """``path`` for a message: ``<root N>/...`` if it is spelled beneath a root (or its
        real path lies beneath one), else normalized as given. Reads nothing but the
        path's real location. An object URL: ``<root N>/key`` beneath an object root, else
        as given."""
        if is_object_url(str(path)):
            try:
                found = self.locate_object(parse_object_url(str(path)))
            except InvalidArgument:
                found = None
            return str(path) if found is None else f"{root_label(found[0])}/{found[1]}".rstrip("/")
        text = os.path.normpath(os.path.abspath(path))
        for spellings in (self.given, self.real):
            for index, root in enumerate(spellings):
                if self.objects[index] is not None:
                    continue
                if text == root:
                    return root_label(index)
                prefix = root.rstrip(os.sep) + os.sep
                if text.startswith(prefix):
                    return f"{root_label(index)}/{text[len(prefix):]}"
        found = self.locate(os.path.realpath(path))
        if found is not None:
            return f"{root_label(found[0])}/{found[1]}".rstrip("/")
        return os.path.normpath(path)

    def open(self, index: int, relative: str) -> int:
        """A descriptor of the regular file ``relative`` beneath root ``index``, opened
        without following any symlink below the root. OSError from the kernel (ELOOP,
        ENOTDIR for a symlink met on the way); DataFileError for what is not a file."""
        root = os.open(self.real[index], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            return open_below(root, relative)
        finally:
            os.close(root)


def open_below(root: int, relative: str) -> int:
    """A descriptor of the regular file ``relative`` beneath the open directory ``root``
    (left open), in blocking mode. OSError from the kernel (ELOOP, ENOTDIR for a symlink
    met on the way); DataFileError for what is not a file."""
    parts = below_parts(relative)
    if parts is None:  # never listed so; refused all the same
        raise OSError(errno.EINVAL, DOTS)
    return regular_file(walk_below(root, parts))


def regular_file(fd: int) -> int:
    """``fd``, opened with ``O_NONBLOCK`` (a FIFO must not wait for a writer), once its
    ``fstat`` says it is a regular file, set to blocking mode; else it is closed:
    DataFileError for what is not a file, OSError from the kernel."""
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise DataFileError(not_regular(mode))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def below_parts(relative: str) -> list[str] | None:
    """The parts of a path relative to a root (empty ones dropped); None if one is ``.`` or
    ``..``."""
    parts = [p for p in relative.split(os.sep) if p]
    return None if any(p in (".", "..") for p in parts) else parts


def walk_below(root: int, parts: list[str]) -> int:
    """A descriptor (``O_NONBLOCK``, unchecked) of what ``parts`` name beneath the open
    directory ``root`` (left open; the root itself for no parts): each folder opened
    relative to the one before with ``O_NOFOLLOW``, the last part too. OSError from the
    kernel."""
    fd = root
    try:
        for part in parts[:-1]:
            below = os.open(part, _DIR_FLAGS, dir_fd=fd)
            if fd != root:
                os.close(fd)
            fd = below
        below = os.open(parts[-1] if parts else os.curdir, _FILE_FLAGS, dir_fd=fd)
    finally:
        if fd != root:
            os.close(fd)
    return below


#: Why a relative path with a ``.`` or ``..`` part is not opened.
DOTS = "a relative path with '.' or '..'"


def not_regular(mode: int) -> str:
    """Why a file of ``mode`` (its ``st_mode``) is not read."""
    return f"it is not a regular file (mode {stat.filemode(mode)})"


def swapped_link(exc: OSError) -> bool:
    """Whether opening beneath a root failed on a symlink met on the way down."""
    return exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK)


class RealPaths:
    """Real paths of many files, each folder's resolved once: the real path of
    ``dir/name`` is the real path of ``dir`` joined with ``name``, unless ``name`` is a
    symlink (``link``) or ``.``/``..`` (then the path is resolved in full)."""

    def __init__(self) -> None:
        self._dirs: dict[str, str] = {}

    def of(self, path: str, link: bool) -> str:
        head, name = os.path.split(path)
        if link or name in ("", ".", ".."):
            return os.path.realpath(path)
        real_head = self._dirs.get(head)
        if real_head is None:
            real_head = self._dirs[head] = os.path.realpath(head or os.curdir)
        return os.path.join(real_head, name)
