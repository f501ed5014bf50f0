"""DALI's epoch end for external sources, in process: where the source raises StopIteration
``run()`` raises it, and keeps raising it until ``reset()``; the batch cut short is
dropped; checkpoints taken before the StopIteration, after it and after ``reset()`` resume
as DALI's do; DALI's iterator without ``size`` or ``reader_name`` ends its epoch there."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from conveyor import fn, pipeline_def
from conveyor.dali.plugin.pytorch import DALIGenericIterator
from conveyor.definition.external_source import SampleInfo

BATCH = 4
EPOCH = 10  # samples: two whole batches, the third cut short (dropped)


def counting(info: SampleInfo) -> np.ndarray:
    if info.idx_in_epoch >= EPOCH + info.epoch_idx * BATCH:  # epochs of 10, 14, 18 samples
        raise StopIteration
    return np.array([info.epoch_idx, info.idx_in_epoch], dtype=np.int64)


def make(checkpoint: bytes | None = None) -> Any:
    @pipeline_def(batch_size=BATCH, num_threads=2, enable_checkpointing=True)
    def pipeline() -> Any:
        return fn.external_source(source=counting, batch=False)
    pipe = pipeline(checkpoint=checkpoint)
    pipe.build()
    return pipe


def rows(batch: Any) -> list[tuple[int, int]]:
    return [(int(e), int(i)) for e, i in np.asarray(batch[0].as_array())]


def test_run_raises_stop_iteration_at_the_epoch_end_until_reset() -> None:
    pipe = make()
    assert rows(pipe.run()) == [(0, i) for i in range(4)]
    assert rows(pipe.run()) == [(0, i) for i in range(4, 8)]
    for _ in range(3):  # samples 8 and 9 make no batch; it keeps raising until reset
        with pytest.raises(StopIteration):
            pipe.run()
    assert pipe.batches_returned == 2
    pipe.reset()
    assert [rows(pipe.run()) for _ in range(3)] == [
        [(1, i) for i in range(k, k + 4)] for k in (0, 4, 8)]
    with pytest.raises(StopIteration):  # epoch 1: 14 samples, 3 whole batches
        pipe.run()
    pipe.reset()
    assert rows(pipe.run())[0] == (2, 0)
    pipe.reset()  # not stopped: nothing, as DALI's
    assert rows(pipe.run())[0] == (2, 4)


def test_checkpoints_around_the_epoch_end_resume_as_dalis() -> None:
    pipe = make()
    pipe.run()
    pipe.run()
    before = pipe.checkpoint()  # after the epoch's last batch, before its StopIteration
    with pytest.raises(StopIteration):
        pipe.run()
    stopped = pipe.checkpoint()
    pipe.reset()
    after_reset = pipe.checkpoint()
    following = [rows(pipe.run()) for _ in range(3)]
    assert following[0][0] == (1, 0)

    restored = make(before)
    assert restored.batches_returned == 2
    with pytest.raises(StopIteration):
        restored.run()
    restored.reset()
    assert [rows(restored.run()) for _ in range(3)] == following

    for blob in (stopped, after_reset):
        resumed = make(blob)
        assert resumed.batches_returned == 2
        got = []
        for _ in range(4):
            try:
                got.append(rows(resumed.run()))
            except StopIteration:
                resumed.reset()
                got.append(rows(resumed.run()))
        assert got[:3] == following
        assert got[3][0] == (2, 0)


def test_iterator_without_size_ends_its_epoch_where_the_source_stops() -> None:
    it = DALIGenericIterator(make(), ["data"], auto_reset=True)
    first = []
    for out in it:
        first.append(out[0]["data"][:, 0].tolist())
        in_epoch = it.checkpoints()[0]  # after the epoch's last batch, at the end
    assert first == [[0] * 4, [0] * 4]
    after_epoch = it.checkpoints()[0]  # after the StopIteration (and the auto reset)
    second = [out[0]["data"][:, 1].tolist() for out in it]
    assert second == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]

    def epochs(cpt: bytes) -> list[list[list[int]]]:
        resumed = DALIGenericIterator(make(cpt), ["data"], auto_reset=True)
        return [[out[0]["data"][:, 1].tolist() for out in resumed] for _ in range(2)]

    # before the StopIteration: the restored iterator meets it taking its first batch
    # ahead (auto_reset starts epoch 1); after it: epoch 1 at once. Either way, epoch 1.
    for cpt in (in_epoch, after_epoch):
        assert epochs(cpt) == [second, [list(range(k, k + 4)) for k in (0, 4, 8, 12)]]
