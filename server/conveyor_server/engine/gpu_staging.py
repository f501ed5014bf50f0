"""How a GPU pipeline's outputs reach its caller: copied out of the GPU into pinned host
memory on a CUDA stream of their own, or kept on the device for a caller in the process.

Copied out (the default, and always for a server): a pipeline's batches are computed on its
device's non-blocking compute stream (``device/streams.py``). Each pipeline copies them out
on its own non-blocking copy stream, ordered after a batch's work by one event: the
batch's last phase records it on the compute stream (of the batch's lane, with
``gpu_streams``), after the batch's work and before any later batch's; when the batch is
staged, the copy stream waits for it (on the GPU; the host does not wait), then the
batch's device-to-host copies are enqueued, then a second event, the batch's fence, which
the consumer waits on before reading the bytes. The copies of batch k so run while batch
k + 1 is decoded and transformed, and the compute stream never waits for a copy. Pinned
buffers let the copies run asynchronously at the bus's speed; ``run()`` lends the caller
the slot's buffer (``staging.kept_outputs``).

Kept on the device (``Pipeline(spec, device_outputs=True)``, ``DeviceHandover``): each
batch's last phase, on the worker that ends it, records an event on the compute stream
after all the batch's work (``finish``); handing the batch out makes the caller's stream
wait for that event, on the GPU: the host never waits, and the caller's work on the batch
runs after the work that computed it. The caller's stream is the one it names
(``cuda_stream``: a handle, a CuPy stream or PyTorch's), by default the legacy default
stream, where CuPy and PyTorch work unless told otherwise. The outputs a GPU operator
computes are ``DeviceTensorList``s over memory lent to the caller, freed only once the
caller's stream is past its last use (``device/device_outputs.py``); the others (a reader's
labels) are host arrays as ever.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from conveyor.errors import Internal, InvalidArgument
from conveyor_server.engine.batch_work import BatchEnd, BatchWork
from conveyor_server.engine.device import streams
from conveyor_server.engine.device.device_outputs import (
    DeviceLoans,
    DeviceTensorList,
    Event,
    lent_views,
)
from conveyor_server.engine.device.output_ring import OutputRing
from conveyor_server.engine.plan import Plan, Ref, SampleSegment
from conveyor_server.engine.segments import SampleState
from conveyor_server.engine.staging import Batch, BatchStager, OutputStaging, Staging, spans

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
    ``copy`` queues a batch's arrays; ``fence`` orders the copy stream after the batch's
    work (the event its last phase recorded with ``computed`` on its lane's compute
    stream), issues the queued copies and returns the event that follows them."""

    def __init__(self, device_id: int) -> None:
        import cupy

        self._cupy = cupy
        self._device_id = max(device_id, 0)
        self._device = cupy.cuda.Device(self._device_id)
        with self._device:
            self._stream = cupy.cuda.Stream(non_blocking=True)
        self._queued: list[tuple[Any, np.ndarray]] = []

    def allocate(self, nbytes: int) -> np.ndarray:
        memory = self._cupy.cuda.alloc_pinned_memory(max(nbytes, 1))
        return np.frombuffer(memory, dtype=np.uint8, count=nbytes)  # keeps the memory alive

    def takes(self, value: Any) -> bool:
        return isinstance(value, self._cupy.ndarray)

    def copy(self, source: Any, target: np.ndarray) -> None:
        self._queued.append((source, target))

    def computed(self) -> Any:
        """An event after the work enqueued so far on this thread's lane of the device."""
        with self._device:
            event = self._cupy.cuda.Event(disable_timing=True)
            event.record(streams.compute_stream(self._device_id, streams.current_lane()))
        return event

    def fence(self, after: Any = None) -> _EventFence:
        cupy = self._cupy
        queued, self._queued = self._queued, []
        sources = [source for source, _ in queued]
        with self._device:
            self._stream.wait_event(after if after is not None else self.computed())
            with self._stream:  # after the wait: a source made contiguous is read in order
                dense = [s if s.flags.c_contiguous else cupy.ascontiguousarray(s)
                         for s in sources]  # the decoders' and kernels' outputs already are
            for source, target, nbytes in spans(
                    (s.data.ptr, t.ctypes.data, s.nbytes)
                    for s, (_, t) in zip(dense, queued, strict=True)):
                cupy.cuda.runtime.memcpyAsync(target, source, nbytes, _DEVICE_TO_HOST,
                                              self._stream.ptr)
            copied = cupy.cuda.Event(disable_timing=True)
            copied.record(self._stream)
        return _EventFence(copied, sources + dense)


@dataclass(frozen=True)
class GpuOutputs:
    """How a GPU pipeline hands out its batches: kept on the device (for ``cuda_stream``)
    or copied out through the ring; and the compute streams its batches take turns on."""

    on_device: bool = False
    cuda_stream: Any = None
    streams: int = 1


def gpu_staging(plan: Plan, depth: int, how: GpuOutputs) -> Staging | None:
    """The way ``plan``'s GPU outputs reach its caller (``how``); None for a pipeline
    without GPU outputs."""
    if how.on_device:
        return device_handover(plan, how.cuda_stream)
    stager = output_stager(plan, depth)
    return OutputStaging(stager) if stager is not None else None


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


# -- kept on the device ------------------------------------------------------------------


class CudaOrder:
    """The events a device handover orders its caller's work by, on device ``device_id``:
    after the work enqueued on its compute stream so far (``computed``), and after the
    caller's (``consumed``); ``wait`` makes the caller's stream wait for an event."""

    def __init__(self, device_id: int, cuda_stream: Any = None) -> None:
        import cupy

        self._cupy = cupy
        self._device_id = device_id
        self._device = cupy.cuda.Device(device_id)
        self.consumer = caller_stream(cupy, cuda_stream, device_id)

    def _record(self, stream: Any) -> Event:
        with self._device:
            event = self._cupy.cuda.Event(disable_timing=True)
            event.record(stream)
        return event

    def computed(self) -> Event:
        """After the work enqueued so far on this thread's lane (``device/streams.py``)."""
        return self._record(streams.compute_stream(self._device_id, streams.current_lane()))

    def consumed(self) -> Event:
        return self._record(self.consumer)

    def wait(self, event: Event) -> None:
        with self._device:
            self.consumer.wait_event(event)


def caller_stream(cupy: Any, given: Any, device_id: int) -> Any:
    """The caller's stream as a CuPy stream: ``given`` as a CuPy stream, a raw handle (an
    int), or an object with ``cuda_stream`` (PyTorch's); None: the legacy default stream."""
    if given is None:
        return cupy.cuda.Stream.null
    if isinstance(given, cupy.cuda.Stream | cupy.cuda.ExternalStream):
        return given
    handle = getattr(given, "cuda_stream", given)
    if not isinstance(handle, int):
        raise InvalidArgument(f"cuda_stream: expected a CUDA stream handle (an int), a CuPy "
                              f"stream or a PyTorch stream, got {type(given).__name__}")
    if handle == 0:
        return cupy.cuda.Stream.null
    return cupy.cuda.ExternalStream(handle, device_id)


class Order(Protocol):
    """What ``DeviceHandover`` needs of the GPU (``CudaOrder``; the tests' stand-in on a
    machine without one)."""

    consumer: Any

    def computed(self) -> Event: ...

    def consumed(self) -> Event: ...

    def wait(self, event: Event) -> None: ...


class HandedBatch:
    """A batch handed out on the device: its GPU outputs as ``DeviceTensorList``s over
    memory lent to the caller (one loan for the batch); nothing to release."""

    def __init__(self, loans: DeviceLoans, stream: Any, is_device: Callable[[Any], bool]
                 ) -> None:
        self._loans = loans
        self._stream = stream
        self._is_device = is_device

    def kept(self, outputs: Batch) -> Batch:
        on_device = [len(out) > 0 and self._is_device(out.at(0)) for out in outputs]
        sources = [s for out, gpu in zip(outputs, on_device, strict=True) if gpu for s in out]
        if not sources:
            return outputs
        import cupy

        loan = self._loans.lend(sources)
        lent = lent_views(cupy, sources, loan)
        return tuple(DeviceTensorList(list(out), out.layout(), loan, lent, self._stream)
                     if gpu else out for out, gpu in zip(outputs, on_device, strict=True))

    def lent(self, outputs: Batch) -> tuple[Batch, Callable[[], None]]:
        return self.kept(outputs), self.release

    def release(self) -> None:
        return None


class DeviceHandover:
    """A GPU pipeline's batches handed to its caller on the device; the batch queue's
    ``Staging`` in place of the ring. ``finish`` is each batch's last phase."""

    def __init__(self, order: Order, is_device: Callable[[Any], bool]) -> None:
        self._order = order
        self._is_device = is_device
        self.loans = DeviceLoans(order.consumed)

    def finish(self, end: BatchEnd, states: list[SampleState]) -> None:
        """The batch's work is all enqueued: mark its end on its lane's compute stream."""
        end.mark = self._order.computed()

    def take(self, work: BatchWork[SampleState], states: Sequence[SampleState],
             batch: int) -> HandedBatch:
        """``batch``, computed: the caller's stream waits (on the GPU) for its work."""
        self.loans.collect()
        event = work.end.mark
        if event is None:  # every computed batch ends in ``finish``
            raise Internal(f"batch {batch} was handed over without the end of its GPU work "
                           "marked: its last phase did not run")
        self._order.wait(event)
        return HandedBatch(self.loans, self._order.consumer, self._is_device)

    def ahead(self, inflight: Iterable[BatchWork[SampleState]], first: int) -> None:
        """Nothing to start ahead: the batches stay where they were computed."""

    def drop(self) -> None:
        """Nothing to give back: a batch's marks go with its work."""

    def close(self) -> None:
        """Wait for the caller's stream to be done with the memory it gave back."""
        self.loans.close()


def device_handover(plan: Plan, cuda_stream: Any = None) -> DeviceHandover | None:
    """The handover of a pipeline whose GPU outputs stay on the device; None for a CPU
    pipeline (its outputs are host arrays whatever it is asked)."""
    if not gpu_outputs(plan):
        return None
    import cupy

    # No device named (-1): device 0, as the operators, the decoder and the copies take it.
    return DeviceHandover(CudaOrder(max(plan.spec.device_id, 0), cuda_stream),
                          lambda value: isinstance(value, cupy.ndarray))
