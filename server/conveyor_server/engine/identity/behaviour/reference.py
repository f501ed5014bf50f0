"""The reference environment: every optional SIMD path of numpy and OpenCV, and Intel's
IPP, turned off, so the libraries run their baseline code. Every x86-64 node computes the
same bytes in it (at some cost in speed): the golden digests are measured in it, and a
mixed node pool can run every server in it (docs/concepts/exactness.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Collection, Mapping
from typing import Any

import cv2


def _opencv_dispatched() -> list[str]:
    """OpenCV's dispatched features, as OPENCV_CPU_DISABLE names them (it warns about, and
    ignores, the ones this CPU lacks)."""
    return [t.strip("*?") for t in cv2.getCPUFeaturesLine().split() if t.startswith("*")]


def reference_environment() -> dict[str, str]:
    """Environment variables that put a new process on the baseline code paths."""
    from numpy._core._multiarray_umath import (  # type: ignore[import-not-found]
        __cpu_dispatch__,
    )

    numpy_targets = list(__cpu_dispatch__)  # ones this CPU lacks are ignored
    env = {"OPENCV_IPP": "disabled"}
    opencv = _opencv_dispatched()
    if opencv:
        env["OPENCV_CPU_DISABLE"] = ",".join(opencv)
    if numpy_targets:
        env["NPY_DISABLE_CPU_FEATURES"] = " ".join(numpy_targets)
    return env


_MEASURE = """
import json, platform
from conveyor_server.engine.identity.behaviour.measure import measure  # the engine before OpenCV
import cv2, numpy, simplejpeg
from conveyor_server.engine.identity.engine_id import OUTPUT_VERSION
b = measure()
print(json.dumps({
    "output_version": OUTPUT_VERSION,
    "machine": platform.machine(),
    "cpu": b.cpu,
    "libraries": {"numpy": numpy.__version__, "opencv": cv2.__version__,
                  "simplejpeg": simplejpeg.__version__},
    "digests": {k: v.hex() for k, v in sorted(b.digests.items())},
}))
"""


def measure_in(env: Mapping[str, str], unset: Collection[str] = ()) -> dict[str, Any]:
    """The behaviour of a new Python process with ``env`` added to this one's environment
    and the variables ``unset`` removed from it: output version, machine, CPU, library
    versions and the digests (hex), as JSON values."""
    child = {k: v for k, v in os.environ.items() if k not in unset} | dict(env)
    out = subprocess.run([sys.executable, "-c", _MEASURE], env=child,
                         check=True, capture_output=True, text=True, timeout=120)
    result: dict[str, Any] = json.loads(out.stdout)
    return result
