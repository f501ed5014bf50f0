"""The output ring's bookkeeping, the staging of a batch into a slot, and a pipeline
returning batches through the ring, with host copies in place of a GPU's (the bookkeeping
is the same; only the copies differ)."""

from __future__ import annotations

import gc
import itertools
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor.client import Client
from conveyor.errors import FailedPrecondition
from conveyor_server import Pipeline
from conveyor_server.app.metrics import Metrics
from conveyor_server.engine.batch_work import BatchEnd
from conveyor_server.engine.device.output_ring import OutputRing
from conveyor_server.engine.segments import SampleState, SegmentRunner
from conveyor_server.engine.staging import (
    ALIGN,
    BatchStager,
    HostCopier,
    OutputStaging,
    copy_out,
    spans,
)
from conveyor_server.service.lifecycle import Runtime
from conveyor_server.service.server import create_server
from conveyor_server.store.redis_process import RedisProcess
from conveyor_server.store.store import Store
from tests.support.images import make_image_folder
from tests.support.staged_pipeline import crops

Ref = tuple[int, int]


def ring(slots: int) -> tuple[OutputRing, list[int]]:
    allocations: list[int] = []

    def allocate(nbytes: int) -> np.ndarray:
        allocations.append(nbytes)
        return np.empty(nbytes, dtype=np.uint8)

    return OutputRing(slots, allocate), allocations


def test_a_slot_is_reused_only_after_its_holder_released_it() -> None:
    out, _ = ring(2)
    first, second = out.claim(0, 100), out.claim(1, 100)
    assert first is not None and second is not None and first is not second
    assert out.claim(2, 100) is None  # both held: nothing is overwritten
    assert out.held() == [0, 1]
    out.release(second)
    third = out.claim(2, 100)
    assert third is second and out.held() == [0, 2]
    out.release(first)
    with pytest.raises(ValueError, match="output slot 0 is not held"):
        out.release(first)


def test_the_oldest_free_slot_is_claimed_first_and_buffers_grow_only_when_too_small() -> None:
    out, allocations = ring(3)
    slots = [out.claim(i, 64) for i in range(3)]
    assert allocations == [64, 64, 64]
    for s in (slots[2], slots[0]):
        assert s is not None
        out.release(s)
    again = out.claim(3, 32)
    assert again is slots[2] and allocations == [64, 64, 64]  # big enough: same memory
    bigger = out.claim(4, 1000)
    assert bigger is slots[0] and bigger is not None and allocations[-1] == 1000
    assert bigger.buffer.size == 1000


def test_batches_claim_in_order_until_a_restart() -> None:
    out, _ = ring(4)
    out.claim(5, 8)
    with pytest.raises(ValueError, match="batch 5 claims an output slot after batch 5"):
        out.claim(5, 8)
    with pytest.raises(ValueError, match="batches claim in order"):
        out.claim(3, 8)
    out.restart()
    assert out.claim(3, 8) is not None
    assert "release the batches taken with run_staged()" in out.exhausted().message
    with pytest.raises(ValueError):
        OutputRing(0, np.empty)


def samples(batch: int, n: int) -> list[dict[Ref, Any]]:
    rng = np.random.default_rng(batch)
    return [{(1, 0): rng.integers(0, 256, (5 + i, 7, 3), dtype=np.uint8),
             (2, 0): rng.random((3, 2 + i)).astype(np.float16),
             (0, 1): np.array([i], dtype=np.int32)} for i in range(n)]


def test_a_staged_batch_is_views_of_one_slot_with_the_same_bytes() -> None:
    copier = HostCopier()
    out = OutputRing(2, copier.allocate)
    stager = BatchStager(out, copier, [(1, 0), (2, 0)])
    batch = samples(0, 4)
    originals = [{k: v.copy() for k, v in s.items()} for s in batch]
    staged = stager.stage(0, batch)
    assert staged is not None
    staged.wait()
    buffer = staged.slot.buffer
    for sample, original in zip(batch, originals, strict=True):
        for ref in ((1, 0), (2, 0)):
            view = sample[ref]
            assert np.shares_memory(view, buffer) and view.dtype == original[ref].dtype
            np.testing.assert_array_equal(view, original[ref])
        assert not np.shares_memory(sample[(0, 1)], buffer)  # not a staged output
    # Each output starts aligned, its samples back to back.
    for ref in ((1, 0), (2, 0)):
        starts = [s[ref].ctypes.data - buffer.ctypes.data for s in batch]
        assert starts[0] % ALIGN == 0
        assert starts[1:] == [a + s[ref].nbytes for a, s in zip(starts, batch[:-1], strict=False)]
    # The second batch goes to the other slot, the third waits for a release.
    second = stager.stage(1, samples(1, 4))
    assert second is not None and second.slot is not staged.slot
    kept = [s[(1, 0)].copy() for s in batch]
    assert stager.stage(2, samples(2, 4)) is None
    assert [s[(1, 0)].tobytes() for s in batch] == [k.tobytes() for k in kept]
    staged.release()
    staged.release()  # once only
    assert stager.stage(2, samples(2, 4)) is not None and out.held() == [1, 2]


def through_the_ring(pipe: Pipeline) -> OutputRing:
    """Send ``pipe``'s images through a ring, as a GPU pipeline's leave the GPU."""
    copier = HostCopier()
    out = OutputRing(4, copier.allocate)
    pipe._queue.staging = OutputStaging(BatchStager(out, copier, pipe._plan.outputs[:1]))
    return out


def test_a_pipeline_returns_its_batches_through_the_ring(tmp_path: Path) -> None:
    root = str(make_image_folder(tmp_path / "imgs", counts=(5, 4)))
    with Pipeline(crops(root)) as plain, Pipeline(crops(root)) as ringed:
        out = through_the_ring(ringed)
        expected = [plain.run() for _ in range(6)]
        batch, release = ringed.run_staged()
        images = list(batch[0])
        assert all(any(np.shares_memory(x, s.buffer) for s in out._slots) for x in images)
        for x, y in zip(images, expected[0][0], strict=True):
            np.testing.assert_array_equal(x, y)
        # Batch 0 is out, so prefetch holds batch 1 only; next_ready submits batch 2 and
        # stages whatever is computed by then (batch 1; batch 2 too if it was that quick).
        ringed.wait_prefetched()
        assert ringed.next_ready(0)
        ringed.wait_prefetched()
        assert ringed.next_ready(0)
        assert out.held() == [0, 1, 2]  # 1 and 2 staged before they are asked for; 0 held
        release()
        assert out.held() == [1, 2]
        batch, release = ringed.run_staged()
        for x, y in zip(batch[0], expected[1][0], strict=True):
            np.testing.assert_array_equal(x, y)
        ringed.run_staged()[1]()  # batch 2, released at once
        release()
        for k in (3, 4):
            images_k, labels_k = ringed.run()  # copied out of the ring, slot given back
            assert k not in out.held()
            assert not any(np.shares_memory(x, s.buffer) for x in images_k
                           for s in out._slots)
            for x, y in zip(images_k, expected[k][0], strict=True):
                np.testing.assert_array_equal(x, y)
            assert [int(v[0]) for v in labels_k] == [int(v[0]) for v in expected[k][1]]
        ringed.seek(1)  # batches staged ahead are given back
        assert out.held() == []
        np.testing.assert_array_equal(ringed.run()[0][0], expected[1][0][0])


def test_a_consumer_that_keeps_every_slot_is_told_to_release(tmp_path: Path) -> None:
    root = str(make_image_folder(tmp_path / "imgs", counts=(4,)))
    with Pipeline(crops(root)) as pipe:
        through_the_ring(pipe)
        for _ in range(4):
            pipe.run_staged()
        with pytest.raises(FailedPrecondition, match="all 4 output buffers are held"):
            pipe.run_staged()


def test_the_stream_encodes_from_the_slots_and_gives_each_back(
        redis_proc: RedisProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server whose pipeline's outputs go through a 4-slot ring streams 12 batches: each
    slot is released once its frames are sent (else the fifth batch would find none), and
    the bytes are the engine's."""
    monkeypatch.delenv("CONVEYOR_TOKEN", raising=False)
    monkeypatch.delenv("CONVEYOR_TOKEN_FILE", raising=False)
    root = make_image_folder(tmp_path / "imgs", counts=(5, 4))
    store = Store(redis_proc.url)
    server, port, service, health = create_server("127.0.0.1:0", store, [tmp_path],
                                                  observer=Metrics())
    runtime = Runtime(server, service, health)
    runtime.start()
    try:
        with Client(f"127.0.0.1:{port}") as client, Pipeline(crops(str(root))) as local:
            remote = client.create("ringed", crops(str(root)))
            out = through_the_ring(service.pipelines.local("ringed").engine)
            for _ in range(12):
                (images, labels), (expected, expected_labels) = remote.run(), local.run()
                for x, y in zip(images, expected, strict=True):
                    np.testing.assert_array_equal(x, y)
                assert [int(v[0]) for v in labels] == [int(v[0]) for v in expected_labels]
            assert len(out.held()) <= out.size
            remote.close()
    finally:
        runtime.stop()
        store.close()


def test_run_copies_a_ringed_output_out_once_into_one_buffer(tmp_path: Path) -> None:
    """``run()`` copies each output the ring holds out of its slot once, the samples back
    to back: the batch as one array is a view of that copy, not another stack."""
    root = str(make_image_folder(tmp_path / "imgs", counts=(5, 4)))
    with Pipeline(crops(root)) as plain, Pipeline(crops(root)) as ringed:
        out = through_the_ring(ringed)
        for _ in range(3):
            (images, labels), (expected, expected_labels) = ringed.run(), plain.run()
            batch = images.as_array()
            assert batch.shape == (3, 24, 20, 3)
            assert np.shares_memory(batch, images[0]) and np.shares_memory(batch, images[2])
            assert not any(np.shares_memory(batch, s.buffer) for s in out._slots)
            np.testing.assert_array_equal(batch, expected.as_array())
            assert [int(v[0]) for v in labels] == [int(v[0]) for v in expected_labels]


def test_copy_out_packs_ragged_samples_and_leaves_other_outputs_alone() -> None:
    slot = np.zeros(4096, dtype=np.uint8)
    a = slot[0:60].view(np.float32).reshape(3, 5)
    b = slot[64:96].view(np.float32).reshape(2, 4)
    a[...] = np.arange(15, dtype=np.float32).reshape(3, 5)
    b[...] = -np.arange(8, dtype=np.float32).reshape(2, 4)
    copies = copy_out([a, b], slot)
    assert copies is not None
    for copy, original in zip(copies, (a, b), strict=True):
        assert copy.dtype == original.dtype and copy.shape == original.shape
        np.testing.assert_array_equal(copy, original)
        assert not np.shares_memory(copy, slot)
    assert copies[1].ctypes.data == copies[0].ctypes.data + a.nbytes  # back to back
    elsewhere = [np.ones((2, 2), dtype=np.int32)]
    assert copy_out(elsewhere, slot) is None


def test_spans_merge_the_copies_that_continue_one_another_in_both_memories() -> None:
    assert spans([(100, 1000, 10), (110, 1010, 6), (116, 1016, 4)]) == [(100, 1000, 20)]
    # A gap in the source or in the target, or a copy out of order, starts a new span.
    assert spans([(100, 1000, 10), (112, 1010, 4), (116, 1014, 4)]) == [
        (100, 1000, 10), (112, 1010, 8)]
    assert spans([(100, 1000, 10), (110, 1020, 4)]) == [(100, 1000, 10), (110, 1020, 4)]
    assert spans([(110, 1010, 4), (100, 1000, 10)]) == [(110, 1010, 4), (100, 1000, 10)]
    assert spans([(100, 1000, 0), (100, 1000, 8), (108, 1008, 0)]) == [(100, 1000, 8)]
    assert spans([]) == []


def test_a_batch_computed_into_one_allocation_leaves_in_one_copy_per_output() -> None:
    """Samples of one shape that lie back to back (as the kernels' outputs do in their one
    allocation) are copied in one span; ragged ones apart are copied one by one; the bytes
    are the same either way."""
    rng = np.random.default_rng(3)
    device = rng.integers(0, 256, 6 * 4 * 5 * 3, dtype=np.uint8)  # one allocation
    uniform = [device[i * 60:(i + 1) * 60].reshape(4, 5, 3) for i in range(6)]
    ragged = [rng.random((2, 3 + i)).astype(np.float32) for i in range(3)]
    batch: list[dict[Ref, np.ndarray]] = [{(1, 0): u} for u in uniform]
    for sample, r in zip(batch, ragged, strict=False):
        sample[(2, 0)] = r
    copier = HostCopier()
    stager = BatchStager(OutputRing(1, copier.allocate), copier, [(1, 0), (2, 0)])
    staged = stager.stage(0, batch)
    assert staged is not None
    assert copier.copied == 1 + 3
    for sample, u in zip(batch, uniform, strict=True):
        np.testing.assert_array_equal(sample[(1, 0)], u)
        assert np.shares_memory(sample[(1, 0)], staged.slot.buffer)
    for sample, r in zip(batch, ragged, strict=False):
        np.testing.assert_array_equal(sample[(2, 0)], r)


def test_run_lends_the_slot_buffer_until_the_caller_drops_the_batch(tmp_path: Path) -> None:
    """``run()`` hands out the ring's own buffer, not a copy: it stays out of the ring
    while any array over it lives (dropped on another thread too), then a later batch
    claims it again instead of a new allocation."""
    root = str(make_image_folder(tmp_path / "imgs", counts=(5, 4)))
    allocated: list[int] = []

    def allocate(nbytes: int) -> np.ndarray:
        allocated.append(nbytes)
        return np.empty(nbytes, dtype=np.uint8)

    with Pipeline(crops(root)) as plain, Pipeline(crops(root)) as ringed:
        copier = HostCopier()
        out = OutputRing(4, allocate)
        ringed._queue.staging = OutputStaging(BatchStager(out, copier, ringed._plan.outputs[:1]))
        images, labels = ringed.run()
        expected = plain.run()[0]
        np.testing.assert_array_equal(images.as_array(), expected.as_array())
        assert out.lent == 1 and not any(np.shares_memory(images[0], s.buffer)
                                         for s in out._slots)
        one = images[1]
        del images, labels
        gc.collect()
        assert out.lent == 1  # one sample still holds the buffer
        holder = [one]
        del one
        dropper = threading.Thread(target=holder.clear)  # the last array, dropped there
        dropper.start()
        dropper.join()
        assert out.lent == 0
        before = len(allocated)
        for _ in range(11):
            batch = ringed.run()[0]
            np.testing.assert_array_equal(batch.as_array(), plain.run()[0].as_array())
            del batch
        # Each batch's buffer came back before a later claim needed one: no more allocated
        # than the ring's slots and the spares, however many batches ran.
        assert len(allocated) - before <= 4


def test_past_its_lending_limit_run_copies(tmp_path: Path) -> None:
    """A caller that keeps every batch gets copies once the ring has lent ``lend_limit``
    buffers: the bytes are the same, and the ring's memory stays bounded."""
    root = str(make_image_folder(tmp_path / "imgs", counts=(5, 4)))
    with Pipeline(crops(root)) as plain, Pipeline(crops(root)) as ringed:
        copier = HostCopier()
        out = OutputRing(4, copier.allocate, lend_limit=2)
        ringed._queue.staging = OutputStaging(BatchStager(out, copier, ringed._plan.outputs[:1]))
        kept = [ringed.run()[0] for _ in range(6)]
        assert out.lent == 2
        for batch in kept:
            np.testing.assert_array_equal(batch.as_array(), plain.run()[0].as_array())
        del kept, batch
        gc.collect()
        assert out.lent == 0


class MarkingCopier(HostCopier):
    """The host copier, marking each batch's end with a token and noting what each batch's
    copies were told to wait for."""

    def __init__(self) -> None:
        super().__init__()
        self._count = itertools.count()
        self.waited_for: list[Any] = []

    def computed(self) -> Any:
        return ("end", next(self._count), threading.current_thread().name)

    def fence(self, after: Any = None) -> Any:
        self.waited_for.append(after)
        return super().fence(after)


def test_each_batchs_copies_wait_for_the_end_its_own_last_phase_marked(tmp_path: Path) -> None:
    root = str(make_image_folder(tmp_path / "imgs", counts=(5, 4)))
    with Pipeline(crops(root)) as plain, Pipeline(crops(root)) as ringed:
        copier = MarkingCopier()
        staging = OutputStaging(BatchStager(OutputRing(4, copier.allocate), copier,
                                            ringed._plan.outputs[:1]))
        marks: dict[int, Any] = {}  # by the id of a batch's first sample's values

        def finish(end: BatchEnd, states: list[SampleState]) -> None:
            staging.finish(end, states)
            marks[id(states[0].values)] = end.mark

        stage = staging.stager.stage

        def stage_and_check(batch: int, samples: Any, after: Any = None) -> Any:
            assert after is not None and after is marks.pop(id(samples[0]))
            return stage(batch, samples, after)

        staging.stager.stage = stage_and_check  # type: ignore[method-assign]
        ringed._segments = ringed._queue._segments = SegmentRunner(ringed._plan,
                                                                   finish=finish)
        ringed._queue.staging = staging
        for k in range(5):
            if k == 3:
                plain.seek(1)
                ringed.seek(1)
            for a, b in zip(plain.run(), ringed.run(), strict=True):
                for x, y in zip(a, b, strict=True):
                    np.testing.assert_array_equal(x, y)
        assert len(copier.waited_for) >= 5
        assert all(mark[2].startswith("conveyor-worker") for mark in copier.waited_for)
