"""Staging a batch's device outputs into an output ring slot, as the batch becomes ready.

``BatchStager.stage`` lays a batch's device arrays out in one slot of the ring (every
output, every sample, in order, each at an offset aligned to 64 bytes), issues one
asynchronous copy per array and puts a host view of the slot in the sample's place, valid
once the batch's fence is waited on. The pipeline stages each batch as soon as it is
computed and before it is asked for, so the copies of batch k run while batch k + 1 is
computed; the stream encodes from the views and then releases the slot.

A ``Copier`` says which values it copies and how: ``gpu_staging.CudaCopier`` copies CuPy
arrays on a CUDA stream into pinned memory; ``HostCopier`` copies numpy arrays at once
(for the tests of this bookkeeping on machines without a GPU).
"""

from __future__ import annotations

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


class HostCopier:
    """Copies host arrays at once: the ring's bookkeeping on a machine without a GPU."""

    def allocate(self, nbytes: int) -> np.ndarray:
        return np.empty(nbytes, dtype=np.uint8)

    def takes(self, value: Any) -> bool:
        return isinstance(value, np.ndarray)

    def copy(self, source: Any, target: np.ndarray) -> None:
        np.copyto(target, source)

    def fence(self) -> Fence:
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
        sizes = [_aligned(int(values[ref].nbytes)) for values, ref in places]
        slot = self.ring.claim(batch, sum(sizes))
        if slot is None:
            return None
        offset = 0
        for (values, ref), size in zip(places, sizes, strict=True):
            source = values[ref]
            view = slot.buffer[offset:offset + int(source.nbytes)].view(
                np.dtype(source.dtype)).reshape(source.shape)
            self._copier.copy(source, view)
            values[ref] = view
            offset += size
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
