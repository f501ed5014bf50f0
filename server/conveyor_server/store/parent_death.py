"""A child process that ends when the process that started it ends, also on ``kill -9``.

Linux's parent-death signal: ``prctl(PR_SET_PDEATHSIG, sig)``, called in the child between
``fork`` and ``exec`` (``subprocess.Popen(preexec_fn=...)``), makes the kernel send ``sig``
to the child once its parent is gone. It survives ``exec`` (redis-server is not
set-user-ID, which would clear it).

Two details decide whether it holds:

* The kernel sends it when the *thread* that forked ends, not the process. So the hook is
  only given to a fork from the main thread, which in CPython lives as long as the process
  (it waits for the other threads at exit). A fork from another thread gets no hook: the
  child would die with that thread, which is worse than outliving the process.
* The parent may die after ``fork`` and before ``prctl``: then the signal is never sent.
  After the ``prctl`` the child checks that its parent is still the process that forked
  it; if not, it does not ``exec``.

Elsewhere (macOS, the BSDs) there is no such call and no hook: a child outlives a parent
killed with ``kill -9``, and the next owner of its directory ends it (``redis_process.py``).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def parent_death_hook(sig: signal.Signals = signal.SIGTERM, *,
                      expected_parent: int | None = None) -> Callable[[], None] | None:
    """A ``preexec_fn`` that binds the child's life to this process: the kernel sends it
    ``sig`` once this process is gone. ``None`` where that cannot hold: not Linux, or
    not called from the main thread (see the module's text).

    ``expected_parent``: the pid the child must see as its parent (default: this
    process); a child that sees another has lost its parent already and does not run."""
    if sys.platform != "linux":
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in the child
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                      ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid() if expected_parent is None else expected_parent
    signal_number = int(sig)

    def bind_to_parent() -> None:  # runs in the child, after fork, before exec
        if prctl(PR_SET_PDEATHSIG, signal_number, 0, 0, 0) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"prctl(PR_SET_PDEATHSIG): {os.strerror(errno)}")
        if os.getppid() != parent:
            # An exception here makes Popen fail in the parent, were it still there.
            raise ChildProcessError(f"parent {parent} ended before the child was bound to it")

    return bind_to_parent
