"""The CPU code paths OpenCV takes, chosen before it loads, so that AVX2 and AVX-512 nodes
compute the same bytes.

On an x86-64 CPU with AVX-512, OpenCV runs two kinds of code that an AVX2 CPU does not:
its own AVX-512 dispatch (``hsv`` and ``color_twist`` change bytes on it) and the AVX-512
build of Intel IPP (``resize`` and ``random_resized_crop``, linear and cubic, change). With
IPP held to its AVX2 build and OpenCV's AVX-512 dispatch off, such a node computes every
behaviour key as an AVX2 node does (measured over all the probe's keys;
docs/concepts/exactness.md), at no cost measurable in whole pipelines (one area resize
alone: ~10 %): a cluster mixing the two restores every checkpoint on every node. Both
settings are environment variables OpenCV reads once, when it loads, so the engine package
sets them on import (``conveyor_server.engine``), before any of its modules imports
``cv2``, and processes this one starts inherit them.

``CONVEYOR_CPU_PATHS`` chooses:

- ``portable`` (the default): on a CPU with AVX-512, ``OPENCV_IPP=avx2`` and
  ``OPENCV_CPU_DISABLE=AVX512-SKX``; on other CPUs nothing (they run these paths already,
  or, without AVX2, paths of their own, which the behaviour identity tells apart);
- ``native``: every path the CPU has.

A variable already set is left as it is: an operator's explicit setting (the baseline
recipe in docs/concepts/exactness.md, for instance) wins.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
from collections.abc import Mapping, MutableMapping

from conveyor.errors import InvalidArgument

log = logging.getLogger("conveyor.engine")

PATHS_VARIABLE = "CONVEYOR_CPU_PATHS"
PORTABLE = "portable"
NATIVE = "native"
CHOICES = (PORTABLE, NATIVE)

#: What ``portable`` sets on an x86-64 CPU with AVX-512.
AVX2_PATHS = {"OPENCV_IPP": "avx2", "OPENCV_CPU_DISABLE": "AVX512-SKX"}


def has_avx512() -> bool:
    """Whether this CPU has the AVX-512 set OpenCV and IPP dispatch to (numpy's detection:
    F, CD, BW, DQ and VL)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    from numpy._core._multiarray_umath import (  # type: ignore[import-not-found]
        __cpu_features__,
    )
    return bool(__cpu_features__.get("AVX512_SKX"))


def library_variables(paths: str, avx512: bool) -> dict[str, str]:
    """The variables ``paths`` asks for on a CPU with (or without) AVX-512."""
    if paths not in CHOICES:
        raise InvalidArgument(f"{PATHS_VARIABLE}: {paths!r} is not one of "
                              f"{', '.join(CHOICES)}")
    return dict(AVX2_PATHS) if paths == PORTABLE and avx512 else {}


def pin(environ: MutableMapping[str, str] | None = None,
        loaded: Mapping[str, object] | None = None) -> dict[str, str]:
    """Set, in ``environ`` (this process's environment), the variables the chosen paths ask
    for that are not set yet; returns those it set. Where OpenCV is loaded already
    (``loaded``: this process's modules) it would not read them: nothing is set, and a
    warning says the process keeps the paths it has."""
    env = os.environ if environ is None else environ
    modules = sys.modules if loaded is None else loaded
    wanted = library_variables(env.get(PATHS_VARIABLE, PORTABLE).strip().lower(),
                               has_avx512())
    missing = {key: value for key, value in wanted.items() if key not in env}
    if not missing:
        return {}
    if "cv2" in modules:
        log.warning("OpenCV was loaded before the engine: it keeps its AVX-512 paths, so "
                    "this process computes some operators' bytes as AVX-512 nodes do, not as "
                    "AVX2 nodes (import conveyor_server before cv2, or set %s)",
                    ", ".join(f"{k}={v}" for k, v in missing.items()))
        return {}
    env.update(missing)
    return missing
