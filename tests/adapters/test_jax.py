"""The JAX adapter's cases (``jax_cases.py``), run by pytest in a process of their own.

Importing JAX starts threads and makes every later ``os.fork`` in the process unsafe (JAX
says so with a RuntimeWarning, an error here): the suite's other tests fork (parallel
sources with ``py_start_method="fork"``, torch's DataLoader workers), so JAX is never
imported into the suite's own process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_jax_adapter_s_cases_pass_in_their_own_process() -> None:
    cases = Path(__file__).with_name("jax_cases.py")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(cases)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "failed" not in run.stdout, run.stdout[-2000:]
