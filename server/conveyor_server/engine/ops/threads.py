"""OpenCV's own threads, turned off where the engine already runs samples in parallel.

The engine computes each sample on one of its ``num_threads`` workers. OpenCV would also
split every call (warpAffine, resize) over a pool of its own, one thread per core, so two
levels of threads would contend for the same cores: on the 2-core benchmark machine the
seed pipeline ran about 9 % faster with OpenCV single-threaded (6 interleaved pairs, every
one faster). The output is the same either way: OpenCV splits work by rows, and every
output pixel is computed the same way whichever thread computes it (a test checks).
"""

from __future__ import annotations

import threading

import cv2

_lock = threading.Lock()
_done = False


def single_threaded_opencv() -> None:
    """Set OpenCV to one thread, once per process, when the first pipeline is built. An
    application that wants otherwise calls ``cv2.setNumThreads(n)`` after that."""
    global _done
    with _lock:
        if not _done:
            cv2.setNumThreads(1)
            _done = True
