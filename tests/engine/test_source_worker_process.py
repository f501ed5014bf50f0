"""Spawned workers of parallel external sources are fresh interpreters: they do not run the
parent's main script (one without a ``__main__`` guard works), and they end when their
parent is killed with ``kill -9``."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
from conveyor import fn, pipeline_def
from conveyor_server import Pipeline

print("top level ran", file=sys.stderr, flush=True)


@pipeline_def(batch_size=4, seed=1, py_num_workers=2, py_start_method="spawn")
def pipe():
    return fn.external_source(source="tests.support.external_sources:SOURCE", batch=False,
                              num_outputs=2, parallel=True)


pipeline = Pipeline(pipe())
print(" ".join(map(str, pipeline._plan.source_pool.pids())), flush=True)
pipeline.run()
sys.stdin.read()
"""


@pytest.mark.parametrize("source", ["samples", "hanging"])
def test_spawned_workers_skip_the_main_script_and_end_with_a_killed_parent(
        tmp_path: Path, source: str) -> None:
    """``samples``: the workers are idle when the parent dies (their pipe closes);
    ``hanging``: they are busy in a call that never returns."""
    script = tmp_path / "no_guard.py"
    script.write_text(SCRIPT.replace("SOURCE", source))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with subprocess.Popen([sys.executable, str(script)], cwd=REPO, env=env,
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as parent:
        assert parent.stdout is not None and parent.stderr is not None
        try:
            line = parent.stdout.readline().decode()
            pids = [int(p) for p in line.split()]
            assert len(pids) == 2, (line, parent.stderr.read().decode() if not line else "")
            watched = [os.pidfd_open(pid) for pid in pids]
            seen = ""
            while source == "hanging" and seen.count("busy") < 2:  # both workers called
                seen += parent.stderr.readline().decode()
        finally:
            parent.send_signal(signal.SIGKILL)
            parent.wait()
        try:
            ended: set[int] = set()
            while len(ended) < len(watched):
                ready, _, _ = select.select([fd for fd in watched if fd not in ended], [], [],
                                            30)
                assert ready, "a worker outlived its parent by 30 s"
                ended.update(ready)
        finally:
            for fd in watched:
                os.close(fd)
            for pid in pids:  # a test that failed leaves none behind
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        # The workers held the parent's stderr: it closes once they are gone. The main
        # script ran once: not again in each worker.
        assert (seen + parent.stderr.read().decode()).count("top level ran") == 1
