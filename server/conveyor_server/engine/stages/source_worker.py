"""A worker process of parallel external sources (``parallel=True``), and the bytes it and
the pipeline exchange.

The process imports each source by its ``"module:function"`` name (nothing is pickled: a
server's registered sources, or an in-process pipeline's module-level functions), or, for
an in-process closure over plain data, imports its module and rebuilds it from its
description (``conveyor.definition.source_closures``), says it
is ready, then computes tasks until its pipe closes. A task is one batch's call
(``batch=True``) or a run of consecutive samples of one batch (``batch=False``), as JSON;
its reply is a JSON header (how it ended; each array's dtype and shape) and, for results,
one payload of the arrays' bytes, each at an offset aligned to ``ALIGN``. Pickle carries
nothing: arrays cross as bytes, dtype and shape.

A reply's ``status``: ``ok``, ``stop`` (StopIteration), ``raised`` (an exception: its type
and message), ``bad`` (a result that cannot be the batch: ``source_results.BadResult``).
A ``probe`` task only asks whether the position exists (``ok`` or ``stop``); its result is
dropped, as the serial stage's is.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from conveyor.definition import source_closures as closures
from conveyor.definition.external_source import BatchInfo, SampleInfo, Source, import_source
from conveyor.errors import InvalidArgument
from conveyor_server.engine.stages.source_results import BadResult, SourceShape

#: Each array's offset in a payload is a multiple of this.
ALIGN = 64


def main(conn: Connection, config: bytes) -> None:
    """The worker's body: ``config`` is JSON ``{"sources": [{"name", "batch",
    "batch_info", "shape"}, ...]}``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the pipeline's process decides
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not a forked parent's handler: end
    try:
        held = json.loads(config)
        sources = [(_source(s), bool(s["batch"]), bool(s["batch_info"]),
                    SourceShape.from_json(s["shape"])) for s in held["sources"]]
    except Exception as exc:  # said to the pipeline, which raises it
        conn.send_bytes(json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
        return
    conn.send_bytes(b'{"ready": true}')
    while True:
        try:
            message = conn.recv_bytes()
        except (EOFError, OSError):
            return
        if not message:
            return
        task = json.loads(message)
        header, arrays = run_task(sources[task["src"]], task)
        header["id"] = task["id"]
        send_reply(conn, header, arrays)


def _source(held: dict[str, Any]) -> Source:
    """A source by its name, or rebuilt from its description (a closure over plain data)."""
    where = f"parallel external source {held['name']!r}"
    if held.get("closure") is None:
        return import_source(held["name"], where)
    try:
        return closures.rebuild(held["closure"])
    except (ImportError, LookupError) as exc:
        raise InvalidArgument(f"{where}: cannot rebuild it: {type(exc).__name__}: {exc}") \
            from None


def run_task(source: tuple[Source, bool, bool, SourceShape],
             task: dict[str, Any]) -> tuple[dict[str, Any], list[np.ndarray]]:
    """Call the source for ``task``; the reply's header and its arrays (sample by sample,
    output by output)."""
    call, batch, batch_info, shape = source
    epoch, iteration, probe = task["epoch"], task["iteration"], task["probe"]
    arrays: list[np.ndarray] = []
    at = 0
    try:
        if batch:
            result = call(BatchInfo(iteration, epoch) if batch_info else iteration)
            if not probe:
                for sample in shape.batch(result):
                    arrays.extend(sample)
        else:
            size = shape.batch_size
            for at in range(task["first"], task["first"] + task["count"]):
                result = call(SampleInfo(iteration * size + at, at, iteration, epoch))
                if not probe:
                    arrays.extend(shape.sample(result))
    except StopIteration:
        return {"status": "stop", "at": at}, []
    except BadResult as bad:
        return {"status": "bad", "at": at, "what": bad.what}, []
    except Exception as exc:  # the batch's error, named by the stage
        return {"status": "raised", "at": at, "type": type(exc).__name__,
                "message": str(exc)}, []
    return {"status": "ok"}, arrays


def send_reply(conn: Connection, header: dict[str, Any], arrays: list[np.ndarray]) -> None:
    layout = []
    parts: list[memoryview | bytes] = []
    size = 0
    for array in arrays:
        pad = -size % ALIGN
        if pad:
            parts.append(bytes(pad))
            size += pad
        layout.append([array.dtype.str, list(array.shape), size])
        parts.append(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data)
        size += array.nbytes
    header["arrays"] = layout
    header["size"] = size
    conn.send_bytes(json.dumps(header).encode())
    if size:
        conn.send_bytes(b"".join(parts))


def receive_reply(conn: Connection) -> tuple[dict[str, Any], list[np.ndarray]]:
    """A reply's header and its arrays: writable views of one buffer received in place."""
    header = json.loads(conn.recv_bytes())
    size = int(header.get("size", 0))
    arrays: list[np.ndarray] = []
    if size:
        payload = bytearray(size)
        conn.recv_bytes_into(payload)
        for dtype, shape, offset in header["arrays"]:
            kind = np.dtype(dtype)
            count = int(np.prod(shape, dtype=np.int64))
            arrays.append(np.frombuffer(payload, kind, count, offset).reshape(shape))
    else:
        arrays = [np.empty(shape, np.dtype(dtype)) for dtype, shape, _ in
                  header.get("arrays", [])]
    return header, arrays


def _end_with(parent: int) -> None:
    """End this process once ``parent`` is no longer its parent (it died, also by
    ``kill -9``, while a task runs: an idle worker sees its pipe close first)."""
    done = threading.Event()
    while not done.wait(0.5):
        if os.getppid() != parent:
            os._exit(0)


def run_child(argv: list[str]) -> None:
    """A worker started by ``source_process.WorkerProcess``: ``FD PARENT``, its end of the
    socket pair and its parent's pid; the config is the first message."""
    conn = Connection(int(argv[0]))
    parent = int(argv[1])
    if os.getppid() != parent:
        return
    threading.Thread(target=_end_with, args=(parent,), daemon=True,
                     name="conveyor-source-parent-watch").start()
    try:
        config = conn.recv_bytes()
    except (EOFError, OSError):
        return
    main(conn, config)


if __name__ == "__main__":
    run_child(sys.argv[1:])
