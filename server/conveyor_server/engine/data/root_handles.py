"""The open directories of a pipeline's data roots, which its files are opened beneath.

Each folder root is opened once, when the pipeline first reads a file beneath it (with
``O_NOFOLLOW``: its real path was resolved when the pipeline was built, so a symlink
standing there now was swapped in since, and is refused like one met below the root), and
kept open until the pipeline's files are closed: a descriptor per root a pipeline reads
from, for as long as the pipeline lives. A read opens its file relative to that directory, so:

- the root is resolved once, not at every read (no walk of the root's own path per file);
- a root renamed or replaced after that first read is not followed: the pipeline goes on
  reading the directory it listed, wherever it now stands, deliberately (as it reads a file
  it opened); a root that could not be opened is tried again at the next read, its files
  failing meanwhile with the error the kernel gave;
- closing is safe while a read runs on another thread: a descriptor is closed only once no
  read holds it (a closed number could otherwise be reused by an unrelated open, and the
  read would go on beneath the wrong directory). A read after ``close()`` opens the roots
  for itself and closes them after.

Fork: the descriptors are ``O_CLOEXEC``, so no program the server runs inherits them; a
process forked from it (an external source's worker forked in process) inherits them as it
inherits every descriptor, never reads through them, and drops them when it exits.
A pipeline dropped without ``close()`` closes them when it is collected.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from conveyor_server.engine.data.roots import DataRoots

_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

#: A root's directory as a read gets it: its descriptor, why it could not be opened (raise
#: a copy: threads share it), or None for an object root (nothing to open).
Handle = int | OSError | None


class RootHandles:
    def __init__(self, roots: DataRoots) -> None:
        self._roots = roots
        self._lock = threading.Lock()
        self._fds: list[Handle] = [None] * len(roots.real)
        self._users = 0
        self._closed = False
        self._finalizer = weakref.finalize(self, _close_all, self._fds)

    @contextmanager
    def held(self, wanted: Iterable[int]) -> Iterator[list[Handle]]:
        """Each root's directory (by index; those of ``wanted`` opened, where not already),
        open until the block ends."""
        with self._lock:
            shared = not self._closed
            if shared:
                self._open(self._fds, wanted)
                self._users += 1
                fds = list(self._fds)
            else:  # closed: this read's own, closed after it
                fds = [None] * len(self._fds)
                self._open(fds, wanted)
        try:
            yield fds
        finally:
            if not shared:
                _close_all(fds)
            else:
                with self._lock:
                    self._users -= 1
                    if self._closed and not self._users:
                        _close_all(self._fds)

    def close(self) -> None:
        """Close the directories (once no read holds them)."""
        with self._lock:
            self._closed = True
            if not self._users:
                _close_all(self._fds)

    def _open(self, fds: list[Handle], wanted: Iterable[int]) -> None:
        """Open the folder roots of ``wanted`` (indices; negative ones: none) not open yet."""
        for index in wanted:
            if index < 0 or isinstance(fds[index], int) or self._roots.objects[index] is not None:
                continue
            try:
                fds[index] = os.open(self._roots.real[index], _ROOT_FLAGS)
            except OSError as exc:  # kept without its traceback (and the frames it holds)
                fds[index] = OSError(exc.errno, exc.strerror)


def _close_all(fds: list[Handle]) -> None:
    for index, fd in enumerate(fds):
        fds[index] = None
        if isinstance(fd, int):
            os.close(fd)
