"""Outputs kept on the device (``Pipeline(spec, device_outputs=True)``): the loans of their
memory and the order a batch is handed over in, checked on any machine with events that
stand in for CUDA's (``engine/device/device_outputs.py``, ``engine/gpu_staging.py``). The
same on a GPU is in ``test_cuda_gpu.py``."""

from __future__ import annotations

import contextlib
import gc
import itertools
import sys
import threading
import time
import types
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor.errors import Internal, InvalidArgument
from conveyor_server import Pipeline
from conveyor_server.engine.batch_work import BatchEnd, BatchWork
from conveyor_server.engine.device import streams
from conveyor_server.engine.device.device_outputs import DeviceLoans
from conveyor_server.engine.gpu_staging import DeviceHandover
from conveyor_server.engine.segments import SampleState, SegmentRunner
from tests.support.images import make_image_folder
from tests.support.staged_pipeline import crops


class FakeEvent:
    """An event that has passed once the test says so."""

    def __init__(self, tag: Any = None) -> None:
        self.tag = tag
        self.done = False
        self.waited_on = 0

    def synchronize(self) -> None:
        self.waited_on += 1
        self.done = True


class Held:
    """Stands in for a batch's device memory: weakly referenced to see when it is freed."""


class Recorder:
    """Records events on the caller's stream, keeping them for the test."""

    def __init__(self) -> None:
        self.events: list[FakeEvent] = []

    def __call__(self) -> FakeEvent:
        self.events.append(FakeEvent())
        return self.events[-1]


def lend_and_drop(loans: DeviceLoans) -> weakref.ref[Held]:
    memory = Held()
    loan = loans.lend([memory])
    freed = weakref.ref(memory)
    del memory, loan
    return freed


def test_memory_given_back_is_freed_only_once_the_callers_stream_is_past_it() -> None:
    record = Recorder()
    events = record.events
    loans = DeviceLoans(record)
    memory = Held()
    loan = loans.lend([memory])
    freed = weakref.ref(memory)
    del memory
    loans.collect()
    assert loans.lent == 1 and not events and freed() is not None  # still out
    del loan
    assert loans.lent == 0 and loans.waiting == 1
    loans.collect()
    assert len(events) == 1 and loans.waiting == 1 and freed() is not None
    loans.collect()  # the caller's stream is not past it yet
    assert len(events) == 1 and freed() is not None
    events[0].done = True
    loans.collect()
    assert loans.waiting == 0 and freed() is None


def test_loans_ended_together_wait_behind_one_event_and_on_any_thread() -> None:
    record = Recorder()
    events = record.events
    loans = DeviceLoans(record)
    freed = [lend_and_drop(loans)]
    box: list[Any] = [loans.lend([Held()])]
    ended = threading.Thread(target=box.clear)  # the last reference dropped elsewhere
    ended.start()
    ended.join()
    assert loans.waiting == 2
    loans.collect()
    assert len(events) == 1 and all(f() is not None for f in freed)
    events[0].done = True
    loans.collect()
    assert loans.waiting == 0 and all(f() is None for f in freed)


def test_closing_waits_for_the_callers_stream_and_later_returns_wait_at_once() -> None:
    record = Recorder()
    events = record.events
    loans = DeviceLoans(record)
    freed = lend_and_drop(loans)
    kept = Held()
    loan = loans.lend([kept])
    loans.close()
    assert events[0].waited_on == 1 and freed() is None and loans.waiting == 0
    later = weakref.ref(kept)
    del kept, loan
    gc.collect()
    assert events[1].waited_on == 1 and later() is None and loans.lent == 0


def test_a_loan_ending_inside_collect_on_its_thread_is_counted_without_a_deadlock() -> None:
    """A garbage collection inside ``collect`` may end a loan on the very thread holding
    the loans' lock: here recording the event drops the last reference to a loan."""
    box: list[Any] = []

    def record() -> FakeEvent:
        box.clear()  # the loan's finalizer runs now, inside collect
        return FakeEvent()

    loans = DeviceLoans(record)
    lend_and_drop(loans)  # so that collect records an event
    box.append(loans.lend([Held()]))
    collecting = threading.Thread(target=loans.collect, daemon=True)
    collecting.start()
    collecting.join(10)
    assert not collecting.is_alive(), "collect deadlocked on a loan ending inside it"
    assert loans.lent == 0 and loans.waiting == 2


# -- the handover ------------------------------------------------------------------------


class FakeOrder:
    """``gpu_staging.Order`` without a GPU: numbered events, and which the caller waited."""

    def __init__(self) -> None:
        self.consumer = "the caller's stream"
        self._count = itertools.count()
        self.waited: list[FakeEvent] = []
        self.computed_by: list[str] = []

    def computed(self) -> FakeEvent:
        """Tagged with the lane of the thread that marks a batch's end."""
        self.computed_by.append(threading.current_thread().name)
        return FakeEvent(("computed", next(self._count), streams.current_lane()))

    def consumed(self) -> FakeEvent:
        return FakeEvent(("consumed", next(self._count)))

    def wait(self, event: Any) -> None:
        self.waited.append(event)


def handed_over(pipe: Pipeline, order: FakeOrder, lanes: int = 1) -> list[tuple[int, Any]]:
    """Hand ``pipe``'s batches over as a GPU pipeline keeping its outputs on the device
    does; returns, for each batch taken, the place among the batches started of the one
    taken, and the event its own last phase marked (None where none did)."""
    handover = DeviceHandover(order, lambda value: False)
    marked: dict[int, Any] = {}  # by the id of a batch's states: its last phase's mark

    def finish(end: BatchEnd, states: list[SampleState]) -> None:
        handover.finish(end, states)
        marked[id(states)] = end.mark

    runner = SegmentRunner(pipe._plan, finish=finish, lanes=lanes)
    started: dict[Any, int] = {}
    start = runner.start

    def start_and_count(*args: Any) -> Any:
        work = start(*args)
        started[work] = len(started)
        return work

    taken: list[tuple[int, Any]] = []
    take = handover.take

    def take_and_note(work: Any, states: Any, batch: int) -> Any:
        taken.append((started[work], marked.pop(id(states), None)))
        return take(work, states, batch)

    runner.start = start_and_count  # type: ignore[method-assign,assignment]
    handover.take = take_and_note  # type: ignore[method-assign]
    pipe._segments = pipe._queue._segments = runner
    pipe._queue.staging = handover
    return taken


def test_each_batch_is_handed_over_after_the_event_its_own_last_phase_recorded(
        tmp_path: Path) -> None:
    root = str(make_image_folder(tmp_path / "imgs", counts=(5, 4)))
    with Pipeline(crops(root)) as plain, Pipeline(crops(root)) as kept:
        order = FakeOrder()
        taken = handed_over(kept, order)
        for k in range(4):
            if k == 2:
                plain.seek(1)
                kept.seek(1)  # the batches computed ahead are dropped, and their events
            for a, b in zip(plain.run(), kept.run(), strict=True):
                for x, y in zip(a, b, strict=True):
                    np.testing.assert_array_equal(x, y)
        assert len(taken) == len(order.waited) == 4
        for (_, event), waited in zip(taken, order.waited, strict=True):
            assert event is not None and waited is event
        assert all(name.startswith("conveyor-worker") for name in order.computed_by)


def test_batches_take_turns_on_the_lanes_and_mark_their_end_on_their_own(
        tmp_path: Path) -> None:
    """With two compute streams, the k-th batch started runs its last phase in lane k mod 2
    (so its end is marked on its own lane's stream), whatever its index; the bytes are the
    same."""
    root = str(make_image_folder(tmp_path / "imgs", counts=(5, 4)))
    with Pipeline(crops(root)) as plain, Pipeline(crops(root), gpu_streams=2) as two:
        order = FakeOrder()
        taken = handed_over(two, order, lanes=2)
        indices = [0, 1, 2, 3, 2, 3, 4]
        for k, index in enumerate(indices):
            if k and index != indices[k - 1] + 1:
                plain.seek(index)
                two.seek(index)
            for a, b in zip(plain.run(), two.run(), strict=True):
                for x, y in zip(a, b, strict=True):
                    np.testing.assert_array_equal(x, y)
        assert [event for _, event in taken] == order.waited
        assert [event.tag[2] for event in order.waited] == [k % 2 for k, _ in taken]
        assert {k % 2 for k, _ in taken} == {0, 1}
        assert streams.current_lane() == 0  # the lane is the batch's, not the thread's


def test_gpu_streams_below_one_are_refused_naming_the_argument(tmp_path: Path) -> None:
    root = str(make_image_folder(tmp_path / "imgs", counts=(4,)))
    with pytest.raises(InvalidArgument, match="gpu_streams: expected at least 1 stream, got 0"):
        Pipeline(crops(root), gpu_streams=0)


def test_a_lane_is_the_threads_while_in_it_and_nests() -> None:
    seen: list[int] = []

    def elsewhere() -> None:
        seen.append(streams.current_lane())

    with streams.lane(3):
        assert streams.current_lane() == 3
        other = threading.Thread(target=elsewhere)
        other.start()
        other.join()
        with streams.lane(1):
            assert streams.current_lane() == 1
        assert streams.current_lane() == 3
    assert streams.current_lane() == 0 and seen == [0]


def test_a_compute_stream_is_made_once_however_many_threads_ask_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers meeting a lane's stream for the first time at once get one stream: two
    would leave a batch's work unordered."""
    made: list[Any] = []

    class SlowStream:  # CuPy's stream, slow to make: the threads overlap in the making
        def __init__(self, non_blocking: bool) -> None:
            time.sleep(0.02)
            made.append(self)

    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(
        Device=lambda device_id: contextlib.nullcontext(), Stream=SlowStream))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(streams, "_STREAMS", {})
    start = threading.Barrier(8)
    got: list[Any] = []

    def ask() -> None:
        start.wait()
        got.append(streams.compute_stream(5, 1))

    askers = [threading.Thread(target=ask) for _ in range(8)]
    for t in askers:
        t.start()
    for t in askers:
        t.join()
    assert len(made) == 1 and len(got) == 8 and all(g is made[0] for g in got)
    assert streams.compute_stream(5, 0) is not made[0] and len(made) == 2


def test_device_outputs_change_nothing_for_a_pipeline_without_gpu_outputs(
        tmp_path: Path) -> None:
    root = str(make_image_folder(tmp_path / "imgs", counts=(4,)))
    with Pipeline(crops(root)) as plain, Pipeline(crops(root), device_outputs=True) as kept:
        assert kept._handover is None and kept._queue.staging is None
        for a, b in zip(plain.run(), kept.run(), strict=True):
            assert type(a) is type(b)
            for x, y in zip(a, b, strict=True):
                np.testing.assert_array_equal(x, y)


class FakeCupyStream:
    """CuPy's ``Stream`` for ``caller_stream`` (whose ``null`` is the legacy stream)."""

    null: FakeCupyStream


FakeCupyStream.null = FakeCupyStream()


class FakeExternalStream:
    def __init__(self, handle: int, device_id: int) -> None:
        self.handle, self.device_id = handle, device_id


FAKE_CUPY = types.SimpleNamespace(cuda=types.SimpleNamespace(
    Stream=FakeCupyStream, ExternalStream=FakeExternalStream))


@pytest.mark.parametrize("given", ["stream", 1.5, [7]])
def test_a_callers_stream_that_is_no_stream_is_refused_naming_it(given: Any) -> None:
    from conveyor_server.engine.gpu_staging import caller_stream

    with pytest.raises(InvalidArgument, match=f"cuda_stream: .* got {type(given).__name__}"):
        caller_stream(FAKE_CUPY, given, 0)


def test_a_callers_stream_is_taken_as_a_handle_a_cupy_or_a_pytorch_stream() -> None:
    from conveyor_server.engine.gpu_staging import caller_stream

    assert caller_stream(FAKE_CUPY, None, 0) is FakeCupyStream.null  # the legacy stream
    assert caller_stream(FAKE_CUPY, 0, 0) is FakeCupyStream.null
    mine = FakeCupyStream()
    assert caller_stream(FAKE_CUPY, mine, 0) is mine
    handle = caller_stream(FAKE_CUPY, 1234, 1)
    assert isinstance(handle, FakeExternalStream) and (handle.handle, handle.device_id) == (1234, 1)
    torch_like = types.SimpleNamespace(cuda_stream=5678)
    wrapped = caller_stream(FAKE_CUPY, torch_like, 0)
    assert isinstance(wrapped, FakeExternalStream) and wrapped.handle == 5678


def test_a_batch_handed_over_without_its_end_marked_is_an_internal_error() -> None:
    """Every computed batch ends in ``finish``; one that did not is not waited for on a
    guess (its lane's stream is not known)."""
    handover = DeviceHandover(FakeOrder(), lambda value: False)
    unmarked: BatchWork[SampleState] = BatchWork([], [], BatchEnd())
    with pytest.raises(Internal, match="batch 3 was handed over without the end of its GPU"):
        handover.take(unmarked, [], 3)
