"""The TensorFlow adapter's cases (``tf_cases.py``), run by pytest in a process of its own.

TensorFlow keeps thread pools of its own, and a ``tf.data`` iterator still computing ahead
when a test ends lives on in them: in the suite's process it would be torn down only when
the suite exits, waiting there for a batch from a server stopped long before. So no
``tf.data`` iterator runs in the suite's own process (``test_readers_tfrecord.py`` only
writes records with TensorFlow there), and the cases' process must end promptly once its
cases are done.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import exit_watch

ROOT = Path(__file__).resolve().parents[2]
#: Longest a finished cases' process may take to exit (TensorFlow's teardown takes a few s).
EXIT_S = 30.0

if os.environ.get("CONVEYOR_SKIP_TENSORFLOW_TESTS") == "1":
    pytest.skip("CONVEYOR_SKIP_TENSORFLOW_TESTS=1: the TensorFlow adapter is NOT tested in "
                "this run", allow_module_level=True)


def test_the_tensorflow_adapter_s_cases_pass_in_their_own_process() -> None:
    cases = Path(__file__).with_name("tf_cases.py")
    start = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-p", "tests.support.exit_watch", str(cases)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
             "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
    wall = time.monotonic() - start
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    summary = re.search(r"(\d+) passed.* in ([\d.]+)s", run.stdout)
    assert summary and "failed" not in run.stdout, run.stdout[-2000:]
    # The cases' own time, then TensorFlow's import and teardown: nothing left waiting.
    assert wall - float(summary.group(2)) < EXIT_S, (
        f"the cases took {summary.group(2)} s, their process {wall:.1f} s: something kept "
        f"it from exiting\n{run.stdout[-2000:]}\nits threads after "
        f"{exit_watch.WATCH_S} s of exiting:\n{run.stderr[-6000:]}")
