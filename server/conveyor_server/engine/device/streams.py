"""Which CUDA stream a pipeline's GPU work runs on, and what orders it.

Every GPU operator and the GPU decoder of a process enqueue their work on one
non-blocking *compute stream* per device (``compute_stream``): the uploads of host
samples, the plan arrays, the kernels, nvImageCodec's decode and the copies that make a
decoded or cropped image contiguous. Work on one stream runs in the order it is enqueued,
so an operator reads its input batch after the work that produced it, with no event and no
host wait between operators; CuPy's memory pool hands a freed block only to later work on
the same stream. Being non-blocking, the stream neither waits for nor holds up the legacy
default stream. The copies out of the GPU run on a copy stream of each pipeline
(``engine/gpu_staging.py``), ordered after a batch's work by one event per batch::

    compute stream (per device)   copy stream (per pipeline)      host
    ---------------------------   --------------------------      ----
    decode k, kernels k
    [event E_k] ---------------->  wait E_k
    decode k+1, kernels k+1         D2H copies of batch k
                                    [event C_k] ----------------->  wait C_k, encode k
    decode k+2, ...                 D2H copies of batch k+1

Pipelines on one device share its compute stream (as they shared the legacy default
stream before), so their kernels run one after another; each has its own copy stream.
CuPy is imported here only when a stream is asked for.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any


@functools.cache
def compute_stream(device_id: int) -> Any:
    """The non-blocking stream GPU work on CUDA device ``device_id`` runs on (one per
    device and process, made on first use)."""
    import cupy

    with cupy.cuda.Device(device_id):
        return cupy.cuda.Stream(non_blocking=True)


@contextlib.contextmanager
def computing(device_id: int) -> Iterator[Any]:
    """Device ``device_id`` as the current device and its compute stream as the current
    stream of this thread (for CuPy's allocations, copies and launches); yields the
    stream."""
    import cupy

    with cupy.cuda.Device(device_id):
        stream = compute_stream(device_id)
        with stream:
            yield stream
