"""The ring of host buffers a GPU pipeline's batches leave the GPU through: bookkeeping only.

A slot holds one batch's output bytes. It is claimed for a batch when the batch's copies
out of the GPU are issued, and handed to whoever encodes or copies the batch; it is free
again only when that holder releases it, so a copy never lands in bytes the stream is
still sending. Batches claim slots in increasing order (after a ``restart``, from any
position), the oldest free slot first. A slot too small for its batch gets a larger buffer
when it is claimed, never while held. The buffers come from ``allocate``: pinned host
memory on a GPU server (``gpu_staging.py``), plain numpy arrays in tests; this module
neither knows nor cares.

A held slot's buffer can also be lent out (``lend``), so that ``Pipeline.run`` hands its
caller the batch's bytes without copying them: the caller keeps the buffer for as long as
any array over it lives, the slot gets another buffer when it is next claimed, and the
lent buffer comes back as a spare when the caller's last array over it is gone. At most
``lend_limit`` buffers are out at once (past it ``lend`` says no and the caller copies),
and at most one spare per slot is kept, so the ring's memory stays within three buffers
per slot.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from conveyor.errors import FailedPrecondition

#: Returns a writable 1-D uint8 array of at least the given size.
Allocate = Callable[[int], np.ndarray]


@dataclass(eq=False)
class Slot:
    number: int
    buffer: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.uint8))
    #: The batch whose bytes it holds; None while free.
    batch: int | None = None


class OutputRing:
    def __init__(self, slots: int, allocate: Allocate, lend_limit: int | None = None) -> None:
        if slots < 1:
            raise ValueError(f"an output ring needs at least one slot, got {slots}")
        self._allocate = allocate
        self._slots = [Slot(n) for n in range(slots)]
        self._free: deque[Slot] = deque(self._slots)
        self._last: int | None = None  # the last batch that claimed a slot
        self._lock = threading.Lock()
        self._lend_limit = slots if lend_limit is None else lend_limit
        self._lent = 0  # buffers lent out and not back yet
        # Lent buffers whose last array is gone: appended by a finalizer, on whichever
        # thread dropped that array (or collected it), so without this ring's lock.
        self._returned: deque[np.ndarray] = deque()
        self._spares: list[np.ndarray] = []

    @property
    def size(self) -> int:
        return len(self._slots)

    def held(self) -> list[int]:
        """The batches whose slots are not free, in claim order."""
        with self._lock:
            return sorted(s.batch for s in self._slots if s.batch is not None)

    def claim(self, batch: int, nbytes: int) -> Slot | None:
        """A free slot with room for ``nbytes`` for ``batch``, or None when every slot is
        held. ``batch`` must come after the last batch that claimed one."""
        with self._lock:
            if self._last is not None and batch <= self._last:
                raise ValueError(f"batch {batch} claims an output slot after batch "
                                 f"{self._last}: batches claim in order")
            if not self._free:
                return None
            slot = self._free.popleft()
            if slot.buffer.size < nbytes:
                spare = self._spare(nbytes)
                slot.buffer = spare if spare is not None else self._allocate(nbytes)
            slot.batch = batch
            self._last = batch
            return slot

    def release(self, slot: Slot) -> None:
        """Give ``slot`` back: its holder is done with its bytes."""
        with self._lock:
            if slot.batch is None or slot not in self._slots:
                raise ValueError(f"output slot {slot.number} is not held")
            slot.batch = None
            self._free.append(slot)

    def lend(self, slot: Slot) -> np.ndarray | None:
        """The held ``slot``'s buffer, as a new array the caller may keep: its views keep
        the buffer out of the ring until the last of them is gone (then it is a spare).
        The slot gets another buffer at its next claim. None when ``lend_limit`` buffers
        are out already."""
        with self._lock:
            if slot.batch is None or slot not in self._slots:
                raise ValueError(f"output slot {slot.number} is not held")
            self._collect()
            if self._lent >= self._lend_limit or not slot.buffer.size:
                return None
            buffer, slot.buffer = slot.buffer, np.empty(0, dtype=np.uint8)
            self._lent += 1
        lent = np.frombuffer(buffer.data, dtype=np.uint8)
        # Every array over ``lent`` holds the memoryview numpy made for it as its base.
        weakref.finalize(lent.base, self._returned.append, buffer)
        return lent

    @property
    def lent(self) -> int:
        """Buffers lent out whose arrays are not all gone yet."""
        with self._lock:
            self._collect()
            return self._lent

    def _collect(self) -> None:
        """Take back the lent buffers that came back (under the lock)."""
        while self._returned:
            buffer = self._returned.popleft()
            self._lent -= 1
            if len(self._spares) < len(self._slots):
                self._spares.append(buffer)

    def _spare(self, nbytes: int) -> np.ndarray | None:
        """A spare buffer of at least ``nbytes`` (under the lock), or None."""
        self._collect()
        for n, buffer in enumerate(self._spares):
            if buffer.size >= nbytes:
                return self._spares.pop(n)
        return None

    def restart(self) -> None:
        """Let claims start again from any batch (after a seek or a rewind)."""
        with self._lock:
            self._last = None

    def exhausted(self) -> FailedPrecondition:
        return FailedPrecondition(
            f"all {self.size} output buffers are held (batches {self.held()}): release the "
            "batches taken with run_staged() before asking for more")
