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

A pipeline may keep several batches in flight on streams of their own (``gpu_streams``):
the k-th batch it starts goes to *lane* k mod N, each lane a compute stream of the device, so
the decode of one batch overlaps the kernels of another. The lane is the thread's while it
runs a batch's GPU phases (``lane``), so the operators and the decoder, which ask
``computing`` for their stream, need no argument for it; each batch's last phase records
the event its copies (or its caller) wait for on its own lane. Which lane computes a batch
changes no byte. CuPy is imported here only when a stream is asked for.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

#: The lane of the batch this thread is running the GPU phases of (0 outside of one).
_THREAD = threading.local()


@contextlib.contextmanager
def lane(number: int) -> Iterator[None]:
    """This thread's GPU work goes to lane ``number``'s compute stream meanwhile."""
    before = current_lane()
    _THREAD.lane = number
    try:
        yield
    finally:
        _THREAD.lane = before


def current_lane() -> int:
    """The lane of this thread's GPU work (0 unless in ``lane``)."""
    number: int = getattr(_THREAD, "lane", 0)
    return number


#: The compute streams made so far, by (device, lane), and the lock that makes each once:
#: two workers meeting a stream for the first time at once must get the same one.
_STREAMS: dict[tuple[int, int], Any] = {}
_MAKING = threading.Lock()


def compute_stream(device_id: int, lane: int = 0) -> Any:
    """The non-blocking stream GPU work on CUDA device ``device_id`` runs on in ``lane``
    (one per device, lane and process, made on first use)."""
    stream = _STREAMS.get((device_id, lane))
    if stream is not None:
        return stream
    import cupy

    with _MAKING:
        stream = _STREAMS.get((device_id, lane))
        if stream is None:
            with cupy.cuda.Device(device_id):
                stream = _STREAMS[(device_id, lane)] = cupy.cuda.Stream(non_blocking=True)
    return stream


@contextlib.contextmanager
def computing(device_id: int) -> Iterator[Any]:
    """Device ``device_id`` as the current device and the compute stream of this thread's
    lane as its current stream (for CuPy's allocations, copies and launches); yields the
    stream."""
    import cupy

    with cupy.cuda.Device(device_id):
        stream = compute_stream(device_id, current_lane())
        with stream:
            yield stream
