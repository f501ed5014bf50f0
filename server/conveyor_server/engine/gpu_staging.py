"""Copies out of the GPU: CuPy arrays into pinned host memory on a CUDA stream of their own.

The copy stream is a blocking stream, so its copies start after the work already queued on
the device's legacy default stream, where the GPU operators leave their batches complete
(``ops/registry.py``); they run while the next batches are decoded and transformed, and an
event recorded after them is the batch's fence. Pinned buffers let the copies run
asynchronously at the bus's speed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from conveyor_server.engine.output_ring import OutputRing
from conveyor_server.engine.plan import Plan, Ref, SampleSegment
from conveyor_server.engine.staging import BatchStager

#: cudaMemcpyDeviceToHost
_DEVICE_TO_HOST = 2


class _EventFence:
    """The event after a batch's copies, and the device arrays they read: kept until the
    copies are done (CuPy's memory pool would hand freed memory to the next batch, on
    another stream, while a copy still reads it)."""

    def __init__(self, event: Any, sources: list[Any]) -> None:
        self._event = event
        self._sources = sources

    def wait(self) -> None:
        self._event.synchronize()
        self._sources = []


class CudaCopier:
    def __init__(self, device_id: int) -> None:
        import cupy

        self._cupy = cupy
        self._device = cupy.cuda.Device(max(device_id, 0))
        with self._device:
            self._stream = cupy.cuda.Stream(non_blocking=False)
        self._sources: list[Any] = []

    def allocate(self, nbytes: int) -> np.ndarray:
        memory = self._cupy.cuda.alloc_pinned_memory(max(nbytes, 1))
        return np.frombuffer(memory, dtype=np.uint8, count=nbytes)  # keeps the memory alive

    def takes(self, value: Any) -> bool:
        return isinstance(value, self._cupy.ndarray)

    def copy(self, source: Any, target: np.ndarray) -> None:
        with self._device:
            source = self._cupy.ascontiguousarray(source)  # the decoders' already are
            self._sources.append(source)
            if source.nbytes:
                self._cupy.cuda.runtime.memcpyAsync(target.ctypes.data, source.data.ptr,
                                                    source.nbytes, _DEVICE_TO_HOST,
                                                    self._stream.ptr)

    def fence(self) -> _EventFence:
        with self._device:
            event = self._cupy.cuda.Event(disable_timing=True)
            event.record(self._stream)
        sources, self._sources = self._sources, []
        return _EventFence(event, sources)


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
