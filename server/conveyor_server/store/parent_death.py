"""A child process that ends when the process that started it ends, also on ``kill -9``.

Linux's parent-death signal: ``prctl(PR_SET_PDEATHSIG, sig)`` makes the kernel send ``sig``
to the calling process once its parent is gone, and it survives ``exec`` (redis-server is
not set-user-ID, which would clear it). The call must be made by the child itself, between
its start and the program it runs. It is made here by a small launcher, run as
``python -m conveyor_server.store.parent_death --parent PID --signal SIG -- PROGRAM ARGS``:
it sets the signal, checks its parent, and ``exec``s the program in its place (same pid).

Why a launcher and not ``Popen(preexec_fn=...)``: a ``preexec_fn`` runs Python in the
forked copy of a process whose other threads (gRPC's, in a server or a trainer) may hold
locks at the fork; such a child can die or hang before it ever runs the program. The
launcher is a fresh interpreter: nothing is inherited but the file descriptors Popen
passes.

Two details decide whether the signal holds:

* The kernel sends it when the *thread* that started the child ends, not the process. So
  the launcher is used only for a start from the main thread, which in CPython lives as
  long as the process (it waits for the other threads at exit). A start from another
  thread is not bound: the child would die with that thread, which is worse than outliving
  the process.
* The parent may die after the start and before ``prctl``: then the signal is never sent.
  After the ``prctl`` the launcher checks that its parent is still the process that
  started it; if not, it exits (``LOST_PARENT``) without running the program.

Elsewhere (macOS, the BSDs) there is no such call and no launcher: a child outlives a
parent killed with ``kill -9``, and the next owner of its directory ends it
(``redis_process.py``).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Sequence

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
#: The launcher's exit status when its parent was gone before it was bound (EX_SOFTWARE).
LOST_PARENT = 70


def bound_command(argv: Sequence[str], sig: signal.Signals = signal.SIGTERM, *,
                  expected_parent: int | None = None) -> list[str] | None:
    """``argv`` run through the launcher, so that the kernel sends it ``sig`` once this
    process is gone. ``None`` where that cannot hold: not Linux, or not called from the
    main thread (see the module's text).

    ``expected_parent``: the pid the launcher must see as its parent (default: this
    process); a launcher that sees another has lost its parent already and does not run
    the program."""
    if sys.platform != "linux":
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    parent = os.getpid() if expected_parent is None else expected_parent
    return [sys.executable, "-m", __name__, "--parent", str(parent), "--signal",
            str(int(sig)), "--", *argv]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__name__}",
        description="Run PROGRAM bound to this process's parent: it gets SIGNAL when the "
                    "parent is gone.")
    parser.add_argument("--parent", type=int, required=True,
                        help="the pid that must be this process's parent")
    parser.add_argument("--signal", type=int, default=int(signal.SIGTERM),
                        help="the signal the program gets when the parent is gone")
    parser.add_argument("program", nargs=argparse.REMAINDER,
                        help="-- PROGRAM [ARG ...]: what runs in this process's place")
    args = parser.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        parser.error("no program given after --")
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                      ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    if prctl(PR_SET_PDEATHSIG, args.signal, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        print(f"{parser.prog}: prctl(PR_SET_PDEATHSIG): {os.strerror(errno)}", file=sys.stderr)
        return 1
    if os.getppid() != args.parent:
        print(f"{parser.prog}: parent {args.parent} ended before {program[0]} was bound to "
              "it: not started", file=sys.stderr)
        return LOST_PARENT
    os.execv(program[0], program)
    return 1  # not reached: execv replaces this process or raises


if __name__ == "__main__":
    sys.exit(main())
