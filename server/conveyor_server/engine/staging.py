"""Staging a batch's device outputs into an output ring slot, as the batch becomes ready.

``BatchStager.stage`` lays a batch's device arrays out in one slot of the ring: each
output's samples back to back, in order, from an offset aligned to 64 bytes (so a batch of
samples of one shape is one array over the slot), puts a host view of the slot in each
sample's place, valid once the batch's fence is waited on, and hands the copies to the
copier, which merges those that continue one another in both memories (``spans``): the
samples of one output computed into one device allocation leave the GPU in one copy. The
pipeline stages each batch as soon as it is computed and before it is asked for, so the
copies of batch k run while batch k + 1 is computed; the stream encodes from the views and
then releases the slot.

A ``Copier`` says which values it copies and how: ``gpu_staging.CudaCopier`` copies CuPy
arrays on a CUDA stream into pinned memory; ``HostCopier`` copies numpy arrays (for the
tests of this bookkeeping on machines without a GPU), merged by the same ``spans``.

``run()`` hands its caller a batch it may keep (``kept_outputs``): the slot's buffer itself,
lent to the caller until its arrays are gone (``OutputRing.lend``), so a batch leaves the
GPU in one copy per output and is not copied again on the host; past the ring's lending
limit (a caller keeping many batches), ``copy_out`` copies the samples out of the slot once,
back to back into one host buffer. Either way a batch of one shape is one array
(``TensorList.as_array`` is a view, not another copy).

A pipeline whose outputs stay on the GPU (``gpu_staging.DeviceHandover``) takes the place
of the ring here: the batch queue sees either as a ``Staging``, and what it takes for a
batch as a ``Taken``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from conveyor.tensor_list import TensorList
from conveyor_server.engine.batch_work import BatchEnd, BatchWork
from conveyor_server.engine.device.output_ring import OutputRing, Slot
from conveyor_server.engine.segments import SampleState

ALIGN = 64


class Fence(Protocol):
    def wait(self) -> None: ...


#: One output per pipeline output, as the batch queue hands them out.
Batch = tuple[TensorList, ...]


class Taken(Protocol):
    """What a batch's outputs need once taken: ``kept`` gives the caller of ``run()``
    outputs to keep as long as it likes (and gives back what the batch held);
    ``lent`` gives the outputs and what to call once done with them (``run_staged()``)."""

    def kept(self, outputs: Batch) -> Batch: ...

    def lent(self, outputs: Batch) -> tuple[Batch, Callable[[], None]]: ...

    def release(self) -> None: ...


class Staging(Protocol):
    """How a GPU pipeline's batches reach the caller (the ring, or kept on the device).
    ``finish`` is each batch's last phase, on the worker that ends the batch: it marks the
    end of the batch's work in ``end`` (the batch's ``BatchWork.end``)."""

    def finish(self, end: BatchEnd, states: list[SampleState]) -> None: ...

    def take(self, work: BatchWork[SampleState], states: Sequence[SampleState],
             batch: int) -> Taken: ...

    def ahead(self, inflight: Iterable[BatchWork[SampleState]], first: int) -> None: ...

    def drop(self) -> None: ...


class Copier(Protocol):
    def allocate(self, nbytes: int) -> np.ndarray: ...

    def takes(self, value: Any) -> bool:
        """Whether ``value`` is an array this copier moves to the host."""
        ...

    def copy(self, source: Any, target: np.ndarray) -> None:
        """Start copying ``source`` into ``target`` (a host view of its size and dtype)."""
        ...

    def computed(self) -> Any:
        """What marks the end of the work enqueued so far on this thread's compute stream
        (an event; None where copies need no ordering): a batch's last phase asks."""
        ...

    def fence(self, after: Any = None) -> Fence:
        """Issue the copies started so far, after ``after`` (what ``computed`` gave for
        their batch; None: after all the work enqueued so far), and return what to wait
        on for them."""
        ...


class _Done:
    def wait(self) -> None:
        return None


#: One copy: (source address, target address, bytes).
Copy = tuple[int, int, int]


def spans(copies: Iterable[Copy]) -> list[Copy]:
    """``copies`` in order, each merged into the one before it where it continues it in
    both memories (its source starts where that one's ends, and so does its target); empty
    copies left out. A merged span copies exactly the bytes of its parts: whatever lies
    between two allocations is never in one."""
    merged: list[Copy] = []
    for source, target, nbytes in copies:
        if not nbytes:
            continue
        if merged:
            s, t, n = merged[-1]
            if s + n == source and t + n == target:
                merged[-1] = (s, t, n + nbytes)
                continue
        merged.append((source, target, nbytes))
    return merged


class HostCopier:
    """Copies host arrays, in the spans a GPU's copies would take: the ring's bookkeeping
    on a machine without a GPU. ``copied`` counts the copies made."""

    def __init__(self) -> None:
        self._queued: list[tuple[np.ndarray, np.ndarray]] = []
        self.copied = 0

    def allocate(self, nbytes: int) -> np.ndarray:
        return np.empty(nbytes, dtype=np.uint8)

    def takes(self, value: Any) -> bool:
        return isinstance(value, np.ndarray)

    def copy(self, source: Any, target: np.ndarray) -> None:
        self._queued.append((np.ascontiguousarray(source), target))

    def computed(self) -> Any:
        return None

    def fence(self, after: Any = None) -> Fence:
        queued, self._queued = self._queued, []
        for source, target, nbytes in spans((s.ctypes.data, t.ctypes.data, s.nbytes)
                                            for s, t in queued):
            ctypes.memmove(target, source, nbytes)
            self.copied += 1
        return _Done()


@dataclass(eq=False)
class StagedBatch:
    """One batch's slot and the fence of its copies; ``release`` gives the slot back
    (once: later calls do nothing)."""

    ring: OutputRing
    slot: Slot
    fence: Fence
    released: bool = False

    def wait(self) -> None:
        self.fence.wait()

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.ring.release(self.slot)

    def kept(self, outputs: Batch) -> Batch:
        return kept_outputs(outputs, self)

    def lent(self, outputs: Batch) -> tuple[Batch, Callable[[], None]]:
        return outputs, self.release


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class BatchStager:
    def __init__(self, ring: OutputRing, copier: Copier, outputs: Sequence[Any]) -> None:
        self.ring = ring
        self.copier = copier
        self._outputs = list(outputs)

    def stage(self, batch: int, samples: Sequence[Any], after: Any = None
              ) -> StagedBatch | None:
        """Copy ``batch``'s device outputs into a slot, after ``after`` (the end of the
        batch's work, as the copier's ``computed`` marked it). ``samples``: each sample's
        ``values`` mapping (by output ref), whose device arrays are replaced by host views.
        None when no slot is free (nothing is changed then)."""
        places = [(values, ref) for ref in self._outputs for values in samples
                  if self.copier.takes(values.get(ref))]
        offsets = []
        end = 0
        for n, (values, ref) in enumerate(places):
            if n == 0 or ref != places[n - 1][1]:  # an output's first sample
                end = _aligned(end)
            offsets.append(end)
            end += int(values[ref].nbytes)
        slot = self.ring.claim(batch, end)
        if slot is None:
            return None
        for (values, ref), offset in zip(places, offsets, strict=True):
            source = values[ref]
            view = slot.buffer[offset:offset + int(source.nbytes)].view(
                np.dtype(source.dtype)).reshape(source.shape)
            self.copier.copy(source, view)
            values[ref] = view
        return StagedBatch(self.ring, slot, self.copier.fence(after))



class OutputStaging:
    """A pipeline's batches in the ring: the one being returned and those staged ahead."""

    def __init__(self, stager: BatchStager) -> None:
        self.stager = stager
        self._ahead: dict[BatchWork[SampleState], StagedBatch] = {}

    def finish(self, end: BatchEnd, states: list[SampleState]) -> None:
        """A batch's last phase: mark the end of its work, which its copies wait for."""
        end.mark = self.stager.copier.computed()

    def take(self, work: BatchWork[SampleState], states: Sequence[SampleState],
             batch: int) -> StagedBatch:
        """``batch``'s outputs in host memory (``work`` computed them): the slot staged
        ahead, or one staged now; waits for its copies."""
        staged = self._ahead.pop(work, None)
        if staged is None:
            staged = self.stager.stage(batch, [s.values for s in states if not s.failed],
                                       work.end.mark)
            if staged is None:
                raise self.stager.ring.exhausted()
        staged.wait()
        return staged

    def ahead(self, inflight: Iterable[BatchWork[SampleState]], first: int) -> None:
        """Start copying out the batches already computed (``inflight``, from batch
        ``first`` on), in order, while slots are free: their copies overlap the work on
        the next ones."""
        for k, work in enumerate(inflight):
            if work in self._ahead:
                continue
            if not work.ready(0):
                return
            try:
                states = work.results()
            except BaseException:  # run() raises it in its turn
                return
            staged = self.stager.stage(first + k, [s.values for s in states if not s.failed],
                                       work.end.mark)
            if staged is None:
                return
            self._ahead[work] = staged

    def drop(self) -> None:
        """Give back the slots of batches staged ahead that will not be returned (after a
        seek, a failed batch or close)."""
        for staged in self._ahead.values():
            staged.wait()  # the copies read device memory until they are done
            staged.release()
        self._ahead.clear()
        self.stager.ring.restart()


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
