"""The records of one or more LMDB databases, listed once and read by key.

``path`` names the databases (LMDB environment folders, each holding ``data.mdb``) in
reading order; the data set is every record of the first database in key order, then of
the next, as DALI's LMDB loader concatenates them. When the pipeline is built each folder
is checked against the data roots (``data_paths.py``), opened read-only without LMDB's lock
file (``lock=False``: nothing is written beside the data, as DALI's ``MDB_NOLOCK``), and its
keys are listed with one cursor pass; the keys are kept in one flat buffer (data sets have
millions of records) and their digest joins the database's identity, so a restore over a
database whose keys changed is refused naming it.

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
import threading
import weakref
from array import array
from collections.abc import Callable, Sequence
from typing import TypeVar

import lmdb
import numpy as np

from conveyor.errors import DataFileError, InvalidArgument, ResourceExhausted, SpecError
from conveyor_server.engine.file_list import unfit_name
from conveyor_server.engine.limits import EngineLimits
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


def _key_digest(keys: Sequence[bytes]) -> str:
    h = hashlib.sha256()
    for key in keys:
        h.update(len(key).to_bytes(4, "little"))
        h.update(key)
    return h.hexdigest()


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
        keys, key_ends, starts = bytearray(), array("q"), [0]
        for given in db_paths:
            real = paths.real_dir(given, "path")
            self.files.append(paths.locate(os.path.join(given, DATA_FILE), "database"))
            env = self._open(real, given)
            with env.begin() as txn:
                listed = list(txn.cursor().iternext(keys=True, values=False))
            for key in listed:
                keys += key
                key_ends.append(len(keys))
            self._envs.append(env)
            self.digests.append(_key_digest(listed))
            starts.append(starts[-1] + len(listed))
        self.count = starts[-1]
        if not self.count:
            raise InvalidArgument(f"{op}: the databases hold no record ({len(db_paths)} "
                                  f"LMDB folder{'s' if len(db_paths) > 1 else ''})")
        self._starts = np.asarray(starts, dtype=np.int64)
        self._keys = bytes(keys)
        self._key_ends = np.frombuffer(key_ends, dtype=np.int64)

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
        start = int(self._key_ends[index - 1]) if index else 0
        return self._keys[start:int(self._key_ends[index])]

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
