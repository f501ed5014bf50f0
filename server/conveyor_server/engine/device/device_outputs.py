"""A GPU pipeline's outputs lent to a caller in the same process, on the device.

``DeviceTensorList`` is one output of one batch as CuPy arrays on the pipeline's device:
``tl[i]`` a sample, ``as_tensor()`` the batch as one array (a view where the samples lie
at one spacing in one allocation, as the GPU operators' outputs do), ``as_cpu()`` the batch
copied to host memory once. DLPack hands any of them to PyTorch or JAX without a copy.

The caller's arrays are views of memory *lent* to it (``DeviceLoans``): it may keep them
as long as it likes. When its last array over a batch is gone, the memory is not freed
at once, as CuPy's pool would free it (to the next batch's decode, while the caller's
kernels may still be reading it): the next ``collect`` records an event on the caller's
stream for it, and the memory goes back to the pool only once that event has passed. So
the work a caller enqueued before dropping its arrays is never overwritten, whatever
stream the pipeline computes on.

The loans' bookkeeping knows nothing of CUDA (``record`` makes its events), so the tests
check it on any machine; CuPy is imported only where an array is made.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from conveyor.tensor_list import TensorList


class Event(Protocol):
    """A point in a stream's work (``cupy.cuda.Event``)."""

    @property
    def done(self) -> bool: ...

    def synchronize(self) -> None: ...


class Loan:
    """What a batch's lent memory keeps alive: when the last array over it is gone, the
    loan ends (a finalizer hands the memory back to ``DeviceLoans``)."""

    __slots__ = ("__weakref__",)


class DeviceLoans:
    """Memory lent to a caller, and memory it gave back that its stream may still read.

    ``record()`` returns an event recorded on the caller's stream now. ``lend(held)``
    starts a loan of the memory ``held`` keeps alive (the arrays the batch was computed
    into); ``collect()``, called on the caller's thread, puts the memory of ended loans
    behind an event on the caller's stream and frees (drops) the memory whose event has
    passed."""

    def __init__(self, record: Callable[[], Event]) -> None:
        self._record = record
        # Re-entrant: a garbage collection inside ``collect`` (or ``lend``) may end a loan
        # on this very thread, and its finalizer takes the lock too.
        self._lock = threading.RLock()
        self._returned: deque[list[Any]] = deque()  # ended, not behind an event yet
        self._waiting: list[tuple[Event, list[list[Any]]]] = []
        self._lent = 0
        self._ended = 0
        self._closed = False

    def lend(self, held: list[Any]) -> Loan:
        loan = Loan()
        ended = weakref.finalize(loan, self._end, held)
        ended.atexit = False  # at exit the process's memory goes with it
        with self._lock:
            self._lent += 1
        return loan

    def _end(self, held: list[Any]) -> None:
        """A loan's last array is gone (on the thread that dropped it): its memory waits
        for the next ``collect``; once closed, nothing collects, so it waits for the
        caller's stream here."""
        with self._lock:
            self._ended += 1
            if not self._closed:
                self._returned.append(held)
                return
        self._record().synchronize()

    def collect(self) -> None:
        """Put the memory of the loans that ended behind an event on the caller's stream,
        and free what the caller's stream is done with."""
        with self._lock:
            ended: list[list[Any]] = []
            while self._returned:
                ended.append(self._returned.popleft())
            if ended:
                self._waiting.append((self._record(), ended))
            self._waiting = [(event, held) for event, held in self._waiting if not event.done]

    @property
    def lent(self) -> int:
        """Loans whose arrays are not all gone yet."""
        with self._lock:
            return self._lent - self._ended

    @property
    def waiting(self) -> int:
        """Batches given back whose memory waits for the caller's stream."""
        with self._lock:
            return sum(len(held) for _, held in self._waiting) + len(self._returned)

    def close(self) -> None:
        """Wait for the caller's stream to be done with what it gave back, and free it;
        memory given back later is freed once the caller's stream is past it."""
        with self._lock:  # a loan ending from now on waits for itself (``_end``)
            self._closed = True
        self.collect()
        with self._lock:
            waiting, self._waiting = self._waiting, []
        for event, _ in waiting:
            event.synchronize()


def lent_views(cupy: Any, sources: Sequence[Any], loan: Loan) -> dict[int, Any]:
    """For each allocation ``sources`` (CuPy arrays) lie in, by its address: the same
    memory as an ``UnownedMemory`` that keeps ``loan`` alive, for views of it."""
    lent: dict[int, Any] = {}
    for source in sources:
        memory = source.data.mem
        if memory.ptr not in lent:
            lent[memory.ptr] = cupy.cuda.UnownedMemory(memory.ptr, memory.size, loan,
                                                       memory.device_id)
    return lent


class DeviceTensorList(TensorList):
    """One output of a batch on the device; its samples are views of lent memory, made
    when asked for. ``stream``: the caller's stream, which copies to the host run on."""

    __slots__ = ("_lent", "_loan", "_stream")

    def __init__(self, sources: Sequence[Any], layout: str, loan: Loan,
                 lent: dict[int, Any], stream: Any) -> None:
        super().__init__(sources, layout)
        self._loan = loan
        self._lent = lent
        self._stream = stream

    def _view(self, source: Any) -> Any:
        import cupy

        memory = source.data.mem
        pointer = cupy.cuda.MemoryPointer(self._lent[memory.ptr], source.data.ptr - memory.ptr)
        return cupy.ndarray(source.shape, source.dtype, pointer, source.strides)

    def __getitem__(self, i: int) -> Any:
        return self._view(self._samples[i])

    def at(self, i: int) -> Any:
        return self._view(self._samples[i])

    def __iter__(self) -> Iterator[Any]:
        return (self._view(s) for s in self._samples)

    def as_array(self) -> Any:
        """The samples (of one shape) as one CuPy array: a view where they lie at one
        spacing in one allocation (as a kernel writes a batch: back to back, each padded to
        16 bytes), else stacked into a new one on the caller's stream."""
        import cupy

        if not self.is_dense_tensor():
            raise ValueError(f"samples have different shapes {sorted(set(self.shape()))}; "
                             "as_array needs uniform shapes")
        samples: list[Any] = self._samples
        if not samples:
            return cupy.empty((0,), dtype=self.dtype)
        first = samples[0]
        step = samples[1].data.ptr - first.data.ptr if len(samples) > 1 else first.nbytes
        if step >= first.nbytes and all(
                s.flags.c_contiguous and s.data.mem is first.data.mem
                and s.data.ptr == first.data.ptr + i * step for i, s in enumerate(samples)):
            memory = first.data.mem
            pointer = cupy.cuda.MemoryPointer(self._lent[memory.ptr],
                                              first.data.ptr - memory.ptr)
            return cupy.ndarray((len(samples), *first.shape), first.dtype, pointer,
                                (step, *first.strides))
        with cupy.cuda.Device(first.device.id), self._stream:
            return cupy.stack(list(self))

    as_tensor = as_array

    def as_cpu(self) -> TensorList:
        """The batch in host memory: one copy where the samples form one array, else one
        per sample; returns once the copies are done."""
        import cupy

        if not self._samples:
            return TensorList([], self.layout(), self.dtype)
        device: Any = self._samples[0]
        # On the caller's stream (made to wait for the batch), a strided batch's gather too.
        with cupy.cuda.Device(device.device.id), self._stream:
            if self.is_dense_tensor():
                host = cupy.asnumpy(self.as_array(), stream=self._stream, blocking=True)
                return TensorList(list(host), self.layout(), self.dtype)
            out = [cupy.asnumpy(v, stream=self._stream, blocking=True) for v in self]
        return TensorList([np.asarray(v) for v in out], self.layout(), self.dtype)

    def __repr__(self) -> str:
        return (f"DeviceTensorList(len={len(self)}, dtype={self.dtype}, "
                f"layout={self.layout()!r})")
