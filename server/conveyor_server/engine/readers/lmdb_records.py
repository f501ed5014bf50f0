"""The records of one or more LMDB databases, listed once and read by key.

``path`` names the databases (LMDB environment folders, each holding ``data.mdb``) in
reading order; the data set is every record of the first database in key order, then of
the next, as DALI's LMDB loader concatenates them. When the pipeline is built each folder
is checked against the data roots (``data_paths.py``), opened read-only without LMDB's lock
file (``lock=False``: nothing is written beside the data, as DALI's ``MDB_NOLOCK``), and its
keys are listed with one cursor pass; the keys are kept in one flat buffer (data sets have
millions of records) and their digest joins the database's identity, so a restore over a
database whose keys changed is refused naming it.

The cursor pass runs in a child process (``_LIST_KEYS``), which first checks that the file
holds every page its meta page counts: LMDB trusts its file, and a truncated copy (a page
past the end: SIGBUS) or a damaged page (LMDB's assertions abort) would kill the process
that walks it. So a damaged database is DATA_LOSS naming it, not the end of the server;
and since the pass visits every branch and leaf page, the reads by key afterwards only
visit pages that were checked (while the file stays as listed). Pipelines built over the
same unchanged data file (device, inode, size, modification time) share its listing while
one of them holds it, as they share its environment.

At run time a record is read by its key in a read transaction of its own (LMDB read
transactions are cheap, and one per read is safe from any worker thread), never by walking
a cursor: any position is one B-tree lookup away, so a restore costs no replay. The value
is handed to the caller inside the transaction (``buffers=True``: a view of the mapped
file, not a copy), after its size is checked against ``limits.max_file_bytes`` (records are
the data set's files). A key that is gone is DATA_LOSS naming the record.

An environment stays open (mapped) as long as a pipeline uses it, and pipelines over the
same database share it: LMDB forbids opening one environment twice in a process (its
identity is its data file's device and inode, as ``lmdb`` checks).
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import weakref
from array import array
from collections.abc import Callable, Sequence
from typing import TypeVar

import lmdb
import numpy as np

from conveyor.errors import DataFileError, InvalidArgument, ResourceExhausted, SpecError
from conveyor_server.engine.admission.limits import EngineLimits
from conveyor_server.engine.data.file_list import unfit_name
from conveyor_server.engine.readers.data_paths import Located, ReaderPaths

#: Read transactions one environment may have at once (LMDB's default; without the lock
#: file it is not enforced, but it bounds the reader table LMDB sizes).
MAX_READERS = 126
DATA_FILE = "data.mdb"

T = TypeVar("T")

#: The environments open in this process, by their data file's (device, inode).
_OPEN: weakref.WeakValueDictionary[tuple[int, int], lmdb.Environment] = \
    weakref.WeakValueDictionary()
_OPEN_LOCK = threading.Lock()


class _Listing:
    """One database's keys, concatenated, where each ends, and their digest."""

    __slots__ = ("__weakref__", "digest", "ends", "keys")

    def __init__(self, keys: bytes, ends: np.ndarray, digest: str) -> None:
        self.keys, self.ends, self.digest = keys, ends, digest

    def key(self, local: int) -> bytes:
        start = int(self.ends[local - 1]) if local else 0
        return self.keys[start:int(self.ends[local])]


#: The listings pipelines hold, by their data file's (device, inode, size, mtime_ns).
_LISTED: weakref.WeakValueDictionary[tuple[int, int, int, int], _Listing] = \
    weakref.WeakValueDictionary()


def _key_digest(keys: bytes, ends: Sequence[int]) -> str:
    """SHA-256 over each key's length (4 bytes, little-endian) and bytes, in order."""
    h = hashlib.sha256()
    start = 0
    for end in ends:
        h.update((end - start).to_bytes(4, "little"))
        h.update(keys[start:end])
        start = end
    return h.hexdigest()


#: The child process that lists one database's keys (``argv[1]``: its folder). On stdout:
#: the count (8 bytes), each key's end in the concatenated keys (8 bytes each), the keys;
#: exit 3 with the reason (a predicate) on stderr for a database LMDB refuses or that is
#: shorter than its meta page says; killed by a signal where LMDB meets a damaged page.
_LIST_KEYS = """
import os, sys
from array import array
import lmdb
folder = sys.argv[1]
try:
    env = lmdb.open(folder, readonly=True, lock=False, create=False, subdir=True,
                    max_readers=1, max_dbs=0, readahead=False)
    size = os.stat(os.path.join(folder, "data.mdb")).st_size
    pages = env.info()["last_pgno"] + 1
    page = env.stat()["psize"]
    if pages * page > size:
        sys.stderr.write(f"is truncated: its meta page counts {pages:,} pages of {page:,} "
                         f"bytes ({pages * page:,} bytes), the file has {size:,}")
        sys.exit(3)
    keys, ends = bytearray(), array("q")
    with env.begin() as txn:
        for key in txn.cursor().iternext(keys=True, values=False):
            keys += key
            ends.append(len(keys))
except lmdb.Error as exc:
    sys.stderr.write("cannot be read: " + str(exc).replace(folder + ": ", ""))
    sys.exit(3)
out = sys.stdout.buffer
out.write(len(ends).to_bytes(8, "little"))
out.write(ends.tobytes())
out.write(keys)
out.flush()
"""


class LmdbRecords:
    """Every record of the reader's databases: which database, and its key."""

    def __init__(self, op: str, db_paths: Sequence[str], paths: ReaderPaths,
                 limits: EngineLimits) -> None:
        if not db_paths:
            raise SpecError(op, "path", "needs at least one LMDB folder")
        for i, value in enumerate(db_paths):
            if why := unfit_name(value):
                raise SpecError(op, "path", f"entry {i} {value!r} {why}")
        self.op = op
        self._paths = paths
        self._limits = limits
        #: Each database's data file as listed (what its identity records).
        self.files: list[Located] = []
        #: Each database's key digest (what its identity adds to its file's).
        self.digests: list[str] = []
        self._envs: list[lmdb.Environment] = []
        self._listings: list[_Listing] = []
        starts = [0]
        for given in db_paths:
            real = paths.real_dir(given, "path")
            self.files.append(paths.locate(os.path.join(given, DATA_FILE), "database"))
            listing = self._listing(real, given)
            self._envs.append(self._open(real, given))
            self._listings.append(listing)
            self.digests.append(listing.digest)
            starts.append(starts[-1] + len(listing.ends))
        self.count = starts[-1]
        if not self.count:
            raise InvalidArgument(f"{op}: the databases hold no record ({len(db_paths)} "
                                  f"LMDB folder{'s' if len(db_paths) > 1 else ''})")
        self._starts = np.asarray(starts, dtype=np.int64)

    def _listing(self, real: str, given: str) -> _Listing:
        """The database's listing: the one a pipeline holds for the same unchanged data
        file, else listed now."""
        try:
            st = os.stat(os.path.join(real, DATA_FILE))
            held: tuple[int, int, int, int] | None = (st.st_dev, st.st_ino, st.st_size,
                                                      st.st_mtime_ns)
        except OSError:
            held = None  # _list_keys names the problem
        listing = _LISTED.get(held) if held else None
        if listing is None:
            keys, ends = self._list_keys(real, given)
            listing = _Listing(keys, np.frombuffer(ends, dtype=np.int64),
                               _key_digest(keys, ends))
            if held:
                _LISTED[held] = listing
        return listing

    def _list_keys(self, real: str, given: str) -> tuple[bytes, array[int]]:
        """The keys of the database in the folder ``real``, concatenated, and where each
        ends: listed by a child process (``_LIST_KEYS``)."""
        name = f"{self.op}: the LMDB database {self._paths.name(given)!r}"
        try:
            done = subprocess.run([sys.executable, "-c", _LIST_KEYS, real],
                                  stdin=subprocess.DEVNULL, capture_output=True, check=False)
        except OSError as exc:
            raise DataFileError(f"{name} could not be listed: {exc.strerror or exc}") from None
        reason = done.stderr.decode("utf-8", "backslashreplace").strip()
        if done.returncode < 0:
            try:
                killed = signal.Signals(-done.returncode).name
            except ValueError:
                killed = f"signal {-done.returncode}"
            last = reason.splitlines()[-1] if reason else ""
            raise DataFileError(f"{name} is damaged: listing its keys was killed by {killed}"
                                + (f" ({last})" if last else ""))
        if done.returncode == 3:
            raise DataFileError(f"{name} {reason}")
        out = done.stdout
        count = int.from_bytes(out[:8], "little") if len(out) >= 8 else -1
        if done.returncode or count < 0 or len(out) < 8 + 8 * count:
            raise DataFileError(f"{name} could not be listed (exit status {done.returncode})"
                                + (f": {reason.splitlines()[-1]}" if reason else ""))
        ends = array("q")
        ends.frombytes(out[8:8 + 8 * count])
        listed = out[8 + 8 * count:]
        if (ends[-1] if count else 0) != len(listed):
            raise DataFileError(f"{name} could not be listed (its keys came back cut short)")
        return listed, ends

    def _open(self, real: str, given: str) -> lmdb.Environment:
        """The environment of the folder ``real``, read-only and without the lock file;
        the one already open when another pipeline reads the same database. Read-ahead is
        off: records are read by key, in the order the reader chooses."""
        try:
            st = os.stat(os.path.join(real, DATA_FILE))
            with _OPEN_LOCK:
                env = _OPEN.get((st.st_dev, st.st_ino))
                if env is None:
                    env = lmdb.open(real, readonly=True, lock=False, create=False, subdir=True,
                                    max_readers=MAX_READERS, max_dbs=0, readahead=False)
                    _OPEN[(st.st_dev, st.st_ino)] = env
                return env
        except (OSError, lmdb.Error) as exc:
            raise DataFileError(f"{self.op}: cannot open the LMDB database "
                                f"{self._paths.name(given)!r}: "
                                f"{getattr(exc, 'strerror', None) or exc}") from None

    def database_of(self, index: int) -> int:
        return int(np.searchsorted(self._starts, index, side="right")) - 1

    def key(self, index: int) -> bytes:
        db = self.database_of(index)
        return self._listings[db].key(index - int(self._starts[db]))

    def where(self, index: int) -> str:
        """The record as messages name it: its database (below its root) and key."""
        db = self.database_of(index)
        folder = os.path.dirname(self._paths.name_of(self.files[db]))
        return f"{folder!r} at key {self.key(index).decode('utf-8', 'backslashreplace')!r}"

    def read(self, index: int, parse: Callable[[memoryview], T]) -> T:
        """``parse`` applied to the record's value, while the value is mapped."""
        db = self.database_of(index)
        key = self.key(index)
        try:
            with self._envs[db].begin(buffers=True) as txn:
                value = txn.get(key)
                if value is None:
                    raise DataFileError(
                        f"{self.op}: record {self.where(index)} is no longer in the database: "
                        "the data set changed under the pipeline")
                limit = self._limits.max_file_bytes
                if limit is not None and len(value) > limit:
                    raise ResourceExhausted(
                        f"{self.op}: record {self.where(index)} is {len(value):,} bytes, "
                        f"above the server's limit limits.max_file_bytes = {limit:,}; it was "
                        "not read")
                return parse(value)
        except lmdb.Error as exc:
            raise DataFileError(f"{self.op}: cannot read record {self.where(index)}: "
                                f"{exc}") from None
