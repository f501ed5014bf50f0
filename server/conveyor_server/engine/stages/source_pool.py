"""The worker processes of a pipeline's parallel external sources (``parallel=True``).

One pool per pipeline, ``py_num_workers`` processes started with ``py_start_method``
(in process: DALI's ``"fork"`` or ``"spawn"``; a server always ``"spawn"``s, since a
process serving gRPC must not fork), closed with the pipeline; a pipeline left unclosed
closes its pool when collected. A forked process is multiprocessing's (daemonic: it ends
with its parent); a spawned one is a fresh interpreter that imports the worker module and
the sources, not the parent's main module (``source_process.py``), and ends with its
parent too. Each process
imports the sources by name (``source_worker.py``). Tasks go to the process with the
fewest in flight; which process computes a task never changes its result, since a source
is a pure function of its position.

**A worker that dies** (killed, out of memory, a crash in native code) is seen at once
(its pipe closes) and replaced by a fresh process, to which its tasks are given again: a
pure source gives them the same values, so the batches are the same bytes. A task whose
worker dies a second time fails with ``ExternalSourceError`` naming the process and how it
ended (a source that crashes its process on some position would otherwise loop): the
batch ends with DATA_LOSS as a raising source's does. Nothing waits without a process to
wait on, so no call hangs on a dead worker.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import signal
import threading
import weakref
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, cast

import numpy as np

from conveyor.errors import ExternalSourceError
from conveyor_server.engine.stages import source_worker
from conveyor_server.engine.stages.source_process import WorkerProcess

#: Seconds a closing pool gives its processes to end after SIGTERM, before SIGKILL.
CLOSE_GRACE_S = 5.0
#: Seconds a new process has to import its sources and say it is ready.
START_TIMEOUT_S = 120.0
#: How many of a task's workers may die before the task fails.
DEATHS_PER_TASK = 2


@dataclass
class Reply:
    header: dict[str, Any]
    arrays: list[np.ndarray]


@dataclass
class _Task:
    id: int
    message: bytes
    source: str
    deaths: int = 0


#: A worker's process: multiprocessing's (forked) or a fresh interpreter's.
Process = BaseProcess | WorkerProcess


@dataclass(eq=False)
class _Worker:
    process: Process
    conn: Connection
    tasks: dict[int, _Task] = field(default_factory=dict)


def _ended(process: Process) -> str:
    code = process.exitcode
    if code is None:
        return "its pipe closed"
    if code < 0:
        try:
            return f"killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _stop(workers: list[_Worker | None]) -> None:
    """End every process of ``workers`` and wait for each (SIGTERM, then SIGKILL)."""
    live = [w for w in workers if w is not None]
    workers[:] = [None] * len(workers)
    for worker in live:
        worker.conn.close()
        if worker.process.is_alive():
            worker.process.terminate()
    for worker in live:
        worker.process.join(CLOSE_GRACE_S)
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join()


class SourcePool:
    def __init__(self, sources: list[dict[str, Any]], workers: int, start_method: str) -> None:
        """``sources``: each parallel source's name, calling convention and shape (see
        ``source_worker.main``); a task names its source by its index here."""
        self.start_method = start_method
        self._config = json.dumps({"sources": sources}).encode()
        self._context: Any = multiprocessing.get_context(start_method)
        self._workers: list[_Worker | None] = [None] * max(1, workers)
        self._lock = threading.Lock()
        self._ids = 0
        self._pending: dict[int, _Task] = {}
        self._done: dict[int, Reply] = {}
        self._closed = False
        self._finalizer = weakref.finalize(self, _stop, self._workers)

    @property
    def size(self) -> int:
        return len(self._workers)

    def pids(self) -> list[int]:
        """The live processes' ids (for tests and metrics)."""
        with self._lock:
            return [w.process.pid for w in self._workers
                    if w is not None and w.process.pid is not None]

    def start(self) -> None:
        """Start the processes not running; each must import its sources (ExternalSourceError
        saying why not)."""
        with self._lock:
            self._start_missing()

    def submit(self, source: int, name: str, **task: Any) -> int:
        """Give a task to the least busy process; its id, for ``collect``."""
        with self._lock:
            self._start_missing()
            self._ids += 1
            message = json.dumps({"id": self._ids, "src": source, **task}).encode()
            queued = _Task(self._ids, message, name)
            self._pending[queued.id] = queued
            self._send(queued)
            return queued.id

    def collect(self, task: int) -> Reply:
        """The reply to ``task``, waiting for it."""
        with self._lock:
            while task not in self._done:
                if task not in self._pending:
                    raise KeyError(f"task {task} was not submitted or was dropped")
                self._pump()
            return self._done.pop(task)

    def drop(self, tasks: list[int]) -> None:
        """Forget ``tasks`` (speculative ones no batch will use); their replies are
        discarded when they come."""
        with self._lock:
            for task in tasks:
                self._done.pop(task, None)
                self._pending.pop(task, None)
                for worker in self._workers:
                    if worker is not None:
                        worker.tasks.pop(task, None)

    def close(self) -> None:
        """End every process (safe to call twice, or while another thread waits in
        ``collect``, which then raises)."""
        self._closed = True
        self._finalizer()

    # -- inside the lock -----------------------------------------------------------------

    def _send(self, task: _Task) -> None:
        slot = min(range(len(self._workers)),
                   key=lambda i: len(w.tasks) if (w := self._workers[i]) else 1 << 30)
        worker = self._workers[slot]
        assert worker is not None
        worker.tasks[task.id] = task
        # One that died is seen by the next _pump, which gives the task to its successor.
        with contextlib.suppress(OSError):
            worker.conn.send_bytes(task.message)

    def _start_missing(self) -> None:
        if self._closed:
            raise ExternalSourceError("the pipeline's parallel external source workers are "
                                      "closed (the pipeline was closed)")
        started: list[tuple[int, Process, Connection]] = []
        for slot, worker in enumerate(self._workers):
            if worker is None:
                started.append((slot, *self._start_one(slot)))
        problems = []
        for slot, process, conn in started:
            try:
                if not conn.poll(START_TIMEOUT_S):
                    process.kill()
                    raise TimeoutError
                hello = json.loads(conn.recv_bytes())
            except TimeoutError:  # an OSError: first
                hello = {"error": f"the process was not ready within {START_TIMEOUT_S:.0f} s"}
            except (EOFError, OSError):
                process.join()
                hello = {"error": f"the process ended before it was ready ({_ended(process)})"}
            if "error" in hello:
                problems.append(hello["error"])
                conn.close()
                process.join()
            else:
                self._workers[slot] = _Worker(process, conn)
        if problems:
            raise ExternalSourceError(
                f"a parallel external source's worker process could not start: {problems[0]}"
                " (each worker process imports the sources by 'module:function' name: the "
                "module must be importable there, as a module of its own, not the main "
                "script under py_start_method='spawn')",
                source=json.loads(self._config)["sources"][0]["name"])

    def _start_one(self, slot: int) -> tuple[Process, Connection]:
        if self.start_method == "spawn":  # a fresh interpreter, not the parent's main module
            child = WorkerProcess(source_worker.__name__)
            with contextlib.suppress(OSError):  # one that ended says so when polled
                child.conn.send_bytes(self._config)
            return child, child.conn
        ours, theirs = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=source_worker.main, args=(theirs, self._config), daemon=True,
            name=f"conveyor-source-worker-{slot}")
        process.start()
        theirs.close()
        return process, ours

    def _pump(self) -> None:
        """Wait for any process to reply or end; take replies; replace an ended one."""
        live = {w.conn: w for w in self._workers if w is not None}
        sentinels = {w.process.sentinel: w for w in live.values()
                     if w.process.sentinel is not None}
        if self._closed or not live:
            raise ExternalSourceError("the pipeline's parallel external source workers are "
                                      "closed (the pipeline was closed)")
        for ready in wait([*live, *sentinels]):
            worker = live[ready] if isinstance(ready, Connection) else sentinels[cast(int, ready)]
            if not any(w is worker for w in self._workers):
                continue  # replaced already in this round
            if isinstance(ready, Connection):
                try:
                    header, arrays = source_worker.receive_reply(worker.conn)
                except (EOFError, OSError):
                    pass
                else:
                    task = worker.tasks.pop(header["id"], None)
                    if task is not None and self._pending.pop(task.id, None) is not None:
                        self._done[task.id] = Reply(header, arrays)
                    continue
            elif worker.conn.poll(0):
                continue  # its last replies first; the closed pipe comes after them
            self._replace(worker)

    def _replace(self, dead: _Worker) -> None:
        slot = next(i for i, w in enumerate(self._workers) if w is dead)
        dead.conn.close()
        dead.process.join(CLOSE_GRACE_S)
        if dead.process.is_alive():
            dead.process.kill()
            dead.process.join()
        how = _ended(dead.process)
        self._workers[slot] = None
        self._start_missing()
        for task in dead.tasks.values():
            task.deaths += 1
            if task.deaths >= DEATHS_PER_TASK:
                self._pending.pop(task.id, None)
                self._done[task.id] = Reply({
                    "status": "died", "message": f"its worker process died twice while "
                    f"computing it (the last, pid {dead.process.pid}: {how})"}, [])
            else:
                self._send(task)
