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
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from conveyor_server.engine.batch_work import BatchWork
from conveyor_server.engine.device.output_ring import OutputRing, Slot
from conveyor_server.engine.segments import SampleState

ALIGN = 64


class Fence(Protocol):
    def wait(self) -> None: ...


class Copier(Protocol):
    def allocate(self, nbytes: int) -> np.ndarray: ...

    def takes(self, value: Any) -> bool:
        """Whether ``value`` is an array this copier moves to the host."""
        ...

    def copy(self, source: Any, target: np.ndarray) -> None:
        """Start copying ``source`` into ``target`` (a host view of its size and dtype)."""
        ...

    def fence(self) -> Fence:
        """What to wait on for every copy started so far."""
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

    def fence(self) -> Fence:
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


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class BatchStager:
    def __init__(self, ring: OutputRing, copier: Copier, outputs: Sequence[Any]) -> None:
        self.ring = ring
        self._copier = copier
        self._outputs = list(outputs)

    def stage(self, batch: int, samples: Sequence[Any]) -> StagedBatch | None:
        """Copy ``batch``'s device outputs into a slot. ``samples``: each sample's
        ``values`` mapping (by output ref), whose device arrays are replaced by host views.
        None when no slot is free (nothing is changed then)."""
        places = [(values, ref) for ref in self._outputs for values in samples
                  if self._copier.takes(values.get(ref))]
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
            self._copier.copy(source, view)
            values[ref] = view
        return StagedBatch(self.ring, slot, self._copier.fence())



class OutputStaging:
    """A pipeline's batches in the ring: the one being returned and those staged ahead."""

    def __init__(self, stager: BatchStager) -> None:
        self.stager = stager
        self._ahead: dict[BatchWork[SampleState], StagedBatch] = {}

    def take(self, work: BatchWork[SampleState], states: Sequence[SampleState],
             batch: int) -> StagedBatch:
        """``batch``'s outputs in host memory (``work`` computed them): the slot staged
        ahead, or one staged now; waits for its copies."""
        staged = self._ahead.pop(work, None)
        if staged is None:
            staged = self.stager.stage(batch, [s.values for s in states if not s.failed])
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
            staged = self.stager.stage(first + k, [s.values for s in states if not s.failed])
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
