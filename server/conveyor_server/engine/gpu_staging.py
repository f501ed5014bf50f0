"""Copies out of the GPU: CuPy arrays into pinned host memory on a CUDA stream of their own.

A pipeline's batches are computed on its device's non-blocking compute stream
(``cuda/streams.py``). Each pipeline copies them out on its own non-blocking copy stream,
ordered after a batch's work by one event: when a batch is staged, an event is recorded
on the compute stream and the copy stream waits for it (on the GPU; the host does not
wait), then the batch's device-to-host copies are enqueued, then a second event, the
batch's fence, which the consumer waits on before reading the bytes. The copies of batch
k so run while batch k + 1 is decoded and transformed, and the compute stream never waits
for a copy. Pinned buffers let the copies run asynchronously at the bus's speed.

``run()`` hands its caller a batch it may keep (``kept_outputs``): the slot's buffer itself,
lent to the caller until its arrays are gone (``OutputRing.lend``), so a batch leaves the
GPU in one copy per output and is not copied again on the host; past the ring's lending
limit (a caller keeping many batches), ``copy_out`` copies the samples out of the slot once,
back to back into one host buffer. Either way a batch of one shape is one array
(``TensorList.as_array`` is a view, not another copy).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from conveyor.tensor_list import TensorList
from conveyor_server.engine.device.output_ring import OutputRing
from conveyor_server.engine.plan import Plan, Ref, SampleSegment
from conveyor_server.engine.staging import BatchStager, StagedBatch, spans

#: cudaMemcpyDeviceToHost
_DEVICE_TO_HOST = 2


class _EventFence:
    """The event after a batch's copies, and the device arrays they read: kept until the
    copies are done (CuPy's memory pool would hand freed memory to later work on the
    compute stream while a copy on the copy stream still reads it)."""

    def __init__(self, event: Any, sources: list[Any]) -> None:
        self._event = event
        self._sources = sources

    def wait(self) -> None:
        self._event.synchronize()
        self._sources = []


class CudaCopier:
    """Copies a pipeline's batches out of device ``device_id`` on a copy stream of its own.
    ``copy`` queues a batch's arrays; ``fence`` orders the copy stream after the work
    enqueued on the compute stream so far, issues the queued copies and returns the event
    that follows them."""

    def __init__(self, device_id: int) -> None:
        import cupy

        from conveyor_server.engine.device import streams

        self._cupy = cupy
        self._device_id = max(device_id, 0)
        self._device = cupy.cuda.Device(self._device_id)
        with self._device:
            self._stream = cupy.cuda.Stream(non_blocking=True)
        self._compute = streams.compute_stream(self._device_id)
        self._queued: list[tuple[Any, np.ndarray]] = []

    def allocate(self, nbytes: int) -> np.ndarray:
        memory = self._cupy.cuda.alloc_pinned_memory(max(nbytes, 1))
        return np.frombuffer(memory, dtype=np.uint8, count=nbytes)  # keeps the memory alive

    def takes(self, value: Any) -> bool:
        return isinstance(value, self._cupy.ndarray)

    def copy(self, source: Any, target: np.ndarray) -> None:
        if not source.flags.c_contiguous:  # the decoders' and kernels' outputs already are
            with self._device, self._compute:
                source = self._cupy.ascontiguousarray(source)
        self._queued.append((source, target))

    def fence(self) -> _EventFence:
        cupy = self._cupy
        queued, self._queued = self._queued, []
        with self._device:
            # The batch's work is enqueued (its host work is done): one ordering point.
            computed = cupy.cuda.Event(disable_timing=True)
            computed.record(self._compute)
            self._stream.wait_event(computed)
            for source, target, nbytes in spans((s.data.ptr, t.ctypes.data, s.nbytes)
                                                for s, t in queued):
                cupy.cuda.runtime.memcpyAsync(target, source, nbytes, _DEVICE_TO_HOST,
                                              self._stream.ptr)
            copied = cupy.cuda.Event(disable_timing=True)
            copied.record(self._stream)
        return _EventFence(copied, [source for source, _ in queued])


def gpu_outputs(plan: Plan) -> list[Ref]:
    """The pipeline outputs a GPU operator computes."""
    on_gpu = {step.op_index for segment in plan.segments
              for step in (segment.steps if isinstance(segment, SampleSegment) else [segment.step])
              if step.op.device == "gpu"}
    return [ref for ref in plan.outputs if ref[0] in on_gpu]


def output_stager(plan: Plan, depth: int) -> BatchStager | None:
    """The stager of a pipeline whose outputs leave a GPU: a ring of ``depth + 2`` pinned
    slots (the batches computed ahead, the one being encoded, one more); None for a CPU
    pipeline."""
    refs = gpu_outputs(plan)
    if not refs:
        return None
    copier = CudaCopier(plan.spec.device_id)
    return BatchStager(OutputRing(depth + 2, copier.allocate), copier, refs)


def copy_out(samples: Sequence[np.ndarray], slot: np.ndarray) -> list[np.ndarray] | None:
    """``samples`` copied out of ``slot`` (a ring slot's buffer) once, back to back in one
    new buffer, so that samples of one shape form one array without another copy; None
    when no sample lies in the slot (an output the ring does not hold, returned as it is).
    """
    if not any(np.may_share_memory(s, slot) for s in samples):
        return None
    packed = np.empty(sum(int(s.nbytes) for s in samples), dtype=np.uint8)
    out = []
    offset = 0
    for sample in samples:
        view = packed[offset:offset + sample.nbytes].view(sample.dtype).reshape(sample.shape)
        np.copyto(view, sample)
        out.append(view)
        offset += sample.nbytes
    return out


def kept_outputs(outputs: Sequence[TensorList], staged: StagedBatch) -> tuple[TensorList, ...]:
    """A staged batch's ``outputs``, the caller's to keep as long as it likes, and the slot
    given back: views of the slot's buffer lent to the caller (``OutputRing.lend``: no
    copy; the buffer comes back to the ring when the caller's arrays are gone), or, where
    the ring lends no more, copied out of the slot once (``copy_out``). The outputs the
    ring does not hold, such as a reader's labels, are returned as they are.
    ``run_staged`` hands out the ring's own views instead, valid until released."""
    try:
        slot = staged.slot.buffer
        lent = staged.ring.lend(staged.slot)
        copies = []
        for out in outputs:
            samples = list(out)
            if lent is not None:
                moved = rebased(samples, slot, lent)
            else:
                moved = copy_out(samples, slot)
            copies.append(out if moved is None else TensorList(moved, out.layout(), out.dtype))
    finally:
        staged.release()
    return tuple(copies)


def rebased(samples: Sequence[np.ndarray], old: np.ndarray,
            new: np.ndarray) -> list[np.ndarray] | None:
    """``samples`` (views of the buffer ``old``) as the same views of ``new``, a buffer of
    the same bytes; None when no sample lies in ``old``."""
    if not any(np.may_share_memory(s, old) for s in samples):
        return None
    start = old.ctypes.data
    out = []
    for sample in samples:
        offset = sample.ctypes.data - start
        out.append(new[offset:offset + sample.nbytes].view(sample.dtype).reshape(sample.shape))
    return out
