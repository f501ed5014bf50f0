"""A remote pipeline ends an external source's epoch where the in-process one does: its
``run()`` raises StopIteration before the batch that opens the next epoch (the server marks
it in the batch header), keeps raising it until ``reset()``, then gives that batch; the
bytes are the in-process ones. A checkpoint taken after the StopIteration resumes at the
next epoch's start, one taken before it raises it first, on another server as in process;
the same with two workers (fan-in); a DALI iterator without ``reader_name`` or ``size``
ends each epoch after the source's batches; ``run_on()`` does not stop."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import conveyor
from conveyor import fn, pipeline_def
from conveyor.dali.plugin.pytorch import DALIGenericIterator
from conveyor_server import Pipeline
from tests.support.resume import batch_bytes
from tests.support.servers import DEADLINE, ServerProcess, Start, client

REPO = Path(__file__).resolve().parents[2]
SOURCE = "tests.support.external_sources:batches"
#: Batches in the source's epochs 0, 1, 2 and 3 (``batch_epoch_length``).
LENGTHS = [3, 4, 3, 4]


def source_env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "CONVEYOR_EXTERNAL_SOURCES": SOURCE}


def with_source(start_server: Start) -> ServerProcess:
    return start_server(env=source_env())


@pipeline_def(batch_size=4, num_threads=2, seed=13, enable_checkpointing=True)
def counted() -> Any:
    """The source's (epoch, iteration, sample) and a random draw per sample."""
    vectors = fn.external_source(source=SOURCE, batch_info=True)
    noise = fn.random.uniform(range=(0.0, 1.0))
    return vectors, noise


def epochs_of(pipe: Any, count: int) -> list[list[Any]]:
    """``count`` epochs of ``pipe``, each the bytes of its batches up to the StopIteration
    that ends it, which is raised again until ``reset()``."""
    out: list[list[Any]] = []
    for _ in range(count):
        epoch: list[Any] = []
        while True:
            try:
                epoch.append(batch_bytes(pipe.run()))
            except StopIteration:
                break
            assert len(epoch) <= max(LENGTHS), "the epoch did not end"
        with pytest.raises(StopIteration):
            pipe.run()
        pipe.reset()
        out.append(epoch)
    return out


def epoch_of(batch: Any) -> int:
    """The source's epoch in a batch (``batch_bytes``): its first sample's first value."""
    return int(np.frombuffer(batch[0][0][2], dtype=np.float32)[0])


def test_run_stops_where_the_in_process_pipeline_does_and_reset_goes_on(
        start_server: Start) -> None:
    server = with_source(start_server)
    expected = epochs_of(counted(), 3)
    assert [len(e) for e in expected] == LENGTHS[:3]
    with client(server) as c:
        pipe = c.create("epochs", counted())
        first = [batch_bytes(pipe.run()) for _ in range(LENGTHS[0])]
        with pytest.raises(StopIteration):
            pipe.run()
        assert pipe.consumed == LENGTHS[0]  # the held batch is not consumed
        assert pipe.checkpoint().batches == LENGTHS[0]
        with pytest.raises(StopIteration):
            pipe.run()
        pipe.reset()
        second = [batch_bytes(batch) for batch in pipe]  # iteration ends with the epoch
        assert [batch_bytes(batch) for batch in pipe] == []  # until reset()
        pipe.reset()
        got = [first, second, *epochs_of(pipe, 1)]
        assert pipe.consumed == sum(LENGTHS[:3])
    assert got == expected
    assert [epoch_of(e[0]) for e in got] == [0, 1, 2]


@pytest.mark.parametrize("workers", [1, 2])
def test_checkpoints_around_the_stop_restore_as_in_process(start_server: Start,
                                                           workers: int) -> None:
    a, b = (start_server.many(2, env=source_env()) if workers == 2 else
            (with_source(start_server), with_source(start_server)))
    # In process: a checkpoint after an epoch's last batch (before its StopIteration) and
    # one after the StopIteration (before reset()).
    local = counted()
    for _ in range(LENGTHS[0]):
        local.run()
    before_stop = local.checkpoint()
    with pytest.raises(StopIteration):
        local.run()
    after_stop = local.checkpoint()
    local.reset()
    rest = epochs_of(local, 2)
    from_before = counted(checkpoint=before_stop)
    with pytest.raises(StopIteration):  # it raises the StopIteration first
        from_before.run()
    from_before.reset()
    assert epochs_of(from_before, 2) == rest
    assert epochs_of(counted(checkpoint=after_stop), 2) == rest

    with conveyor.Client([a.address, b.address], timeout=DEADLINE, place=False,
                         stream_timeout=120) as c:
        pipe = c.create("held", counted(), workers=workers)
        for _ in range(LENGTHS[0]):
            pipe.run()
        remote_before = pipe.checkpoint()
        with pytest.raises(StopIteration):
            pipe.run()
        remote_after = pipe.checkpoint()
        assert remote_before.batches == remote_after.batches == LENGTHS[0]
        assert remote_before.data == before_stop  # the blobs the in-process engine writes
        assert remote_after.data == after_stop
        if workers == 2:
            assert pipe.fan_in is not None and len(pipe.workers) == 2
        pipe.reset()
        assert epochs_of(pipe, 2) == rest  # the held batch, then on

        restored = c.restore("after", checkpoint=remote_after.id, via=b.address)
        assert epochs_of(restored, 2) == rest  # no StopIteration at its start
        again = c.restore("before", checkpoint=remote_before.id, via=b.address)
        with pytest.raises(StopIteration):
            again.run()
        again.reset()
        assert epochs_of(again, 2) == rest


def test_fan_in_stops_where_one_stream_does(start_server: Start) -> None:
    servers = start_server.many(2, env=source_env())
    expected = epochs_of(counted(), 3)
    with conveyor.Client([s.address for s in servers], timeout=DEADLINE, place=False,
                         stream_timeout=120) as c:
        pipe = c.create("fanned", counted(), workers=2)
        got = epochs_of(pipe, 3)
        assert len(pipe.workers) == 2
        assert pipe.consumed == sum(LENGTHS[:3])
        assert pipe.fan_in is not None and pipe.fan_in.mismatches == 0
    assert got == expected


def test_a_dali_iterator_without_reader_or_size_ends_each_remote_epoch(
        start_server: Start) -> None:
    server = with_source(start_server)
    with client(server) as c:
        pipe = c.create("iterated", counted())
        it = DALIGenericIterator([pipe], ["vectors", "noise"])
        seen = []
        for _ in range(3):  # one epoch each (a pass that did not end would take one more)
            seen.append([int(step[0]["vectors"][0, 0].item())
                         for step in itertools.islice(it, max(LENGTHS) + 1)])
        assert seen == [[0] * LENGTHS[0], [1] * LENGTHS[1], [2] * LENGTHS[2]]
        assert pipe.consumed == sum(LENGTHS[:3])


def test_run_on_goes_on_past_the_epoch_ends_as_the_engine(start_server: Start) -> None:
    """``run_on()`` (what the torch and TensorFlow datasets read): the engine's sequence,
    which does not stop."""
    server = with_source(start_server)
    with Pipeline(counted()) as engine:
        expected = [batch_bytes(engine.run()) for _ in range(sum(LENGTHS))]
    with client(server) as c:
        pipe = c.create("on", counted())
        got = [batch_bytes(pipe.run_on()) for _ in range(sum(LENGTHS))]
        assert pipe.consumed == sum(LENGTHS)
    assert got == expected
    assert [epoch_of(b) for b in got] == [e for e, n in enumerate(LENGTHS) for _ in range(n)]
