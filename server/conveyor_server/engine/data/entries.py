"""A reader's file as listed when the pipeline is built, the names a listing holds, and
the lines of a file list (``path label``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from conveyor.errors import InvalidArgument

#: What ``str.splitlines`` splits on: a listing holds one file per line.
_LINE_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")


@dataclass(frozen=True, slots=True)
class FileEntry:
    path: str
    size: int
    label: int
    #: Modification time in nanoseconds, as listed.
    mtime_ns: int = 0
    #: The data root the file lies beneath (-1 without data roots) and its real path
    #: relative to that root: where it is read from, derived from ``path`` at listing.
    root: int = field(default=-1, compare=False)
    relative: str = field(default="", compare=False)
    #: An object's ETag and version id, as listed ("" for a file).
    etag: str = ""
    version: str = ""

    @property
    def stamp(self) -> str:
        """What changes when the file's contents change, as listed: its modification time,
        or an object's ETag (and version id where the bucket keeps versions)."""
        if not self.etag:
            return str(self.mtime_ns)
        return f"etag {self.etag}" + (f" version {self.version}" if self.version else "")


def unfit_name(path: str) -> str:
    """Why a listing cannot hold ``path`` ("" when it can)."""
    if "\0" in path or not _LINE_BREAKS.isdisjoint(path):
        return "has a NUL byte or a line break in its name (a listing holds one per line)"
    try:
        path.encode()
    except UnicodeEncodeError:
        return "has a name that is not UTF-8"
    return ""


def file_list_lines(text: str, name: str, op: str) -> list[tuple[int, str, int]]:
    """The entries of a file list's text, one ``path label`` a line (blank lines skipped):
    (line number, path as written, label); InvalidArgument naming the line otherwise."""
    entries = []
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
            raise InvalidArgument(f"{op}: file_list {name!r} line {number}: expected "
                                  f"'path label' with an integer label >= 0, got {line!r}")
        entries.append((number, parts[0], label))
    return entries
