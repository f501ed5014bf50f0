"""Starting a parallel external source's worker as a fresh interpreter that does not import
the parent's main module (``py_start_method="spawn"``, and always on a server).

multiprocessing's spawn re-imports the parent's ``__main__`` in every child (a server's
entry module and all it loads, or a script's body), which costs about a second a worker
and runs a script's top level again. Here a worker is ``python -m
conveyor_server.engine.stages.source_worker FD PARENT``: it imports that module, then the
sources' modules, and nothing else. It talks over one end of a socket pair with the
protocol of ``source_worker`` (JSON and raw bytes); its first message is the config.

It ends with its parent: its pipe closes when the parent is gone (read as the end of its
work), and a thread of the worker ends the process once its parent's pid is no longer its
parent (a parent killed with ``kill -9`` while a task runs). Its object has the members of
multiprocessing's ``Process`` the pool uses (``pid``, ``sentinel``, ``exitcode``,
``is_alive``, ``terminate``, ``kill``, ``join``); ``sentinel`` is a pidfd, readable once
the process has ended.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from multiprocessing.connection import Connection


class WorkerProcess:
    def __init__(self, module: str) -> None:
        """Start ``python -m module FD PARENT``; ``conn``: this side of its socket pair."""
        ours, theirs = socket.socketpair()
        path = [p or os.getcwd() for p in sys.path]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
        try:
            self._popen = subprocess.Popen(
                [sys.executable, "-m", module, str(theirs.fileno()), str(os.getpid())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env,
                cwd=os.getcwd())
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.conn = Connection(ours.detach())
        self.pid: int | None = self._popen.pid
        try:
            self.sentinel: int | None = os.pidfd_open(self._popen.pid)
        except (AttributeError, OSError):  # not Linux 5.3+: its pipe alone tells its end
            self.sentinel = None

    @property
    def exitcode(self) -> int | None:
        """As multiprocessing's: None while it runs, ``-signal`` when killed by one."""
        return self._popen.poll()

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    def terminate(self) -> None:
        if self.is_alive():
            self._popen.terminate()

    def kill(self) -> None:
        if self.is_alive():
            self._popen.kill()

    def join(self, timeout: float | None = None) -> None:
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return
        if self.sentinel is not None:
            os.close(self.sentinel)
            self.sentinel = None
