"""Fan-in with real servers: one trainer fed by k servers receives exactly the one-server
batch sequence, byte for byte, in order, whatever k is: a shuffled reader across epochs, a
sharded reader beside an external source whose epochs end inside batches, and a
data-parallel job whose ranks each have their own workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fleet.support import fleet, rotating, sharded_with_source, trainer
from tests.support.resume import batch_bytes, reference, run_across_epochs
from tests.support.servers import Start

#: Batches read: more than three epochs of the rotating pipeline.
COUNT = 30


@pytest.mark.parametrize("k", [1, 2, 3])
def test_k_servers_give_the_one_server_sequence(start_server: Start, image_root: Path,
                                                k: int) -> None:
    servers = fleet(start_server, 3)
    spec = rotating(image_root)
    expected = reference(spec, COUNT)
    with trainer(*servers) as c:
        pipe = c.open("fanned", spec, run_id="run", workers=k)
        got = [batch_bytes(pipe.run()) for _ in range(COUNT)]
        assert len(pipe.workers) == k
        assert pipe.via == servers[0].address  # the holder keeps the pipeline
        saved = pipe.checkpoint()
        assert saved.batches == COUNT
        if k > 1:  # the checkpoint first told the holder the position (one stream's
            # acknowledgements, k = 1, reach it on their own thread, later)
            assert c.pipeline("fanned").acknowledged == COUNT
            assert pipe.fan_in is not None and pipe.fan_in.mismatches == 0
    assert got == expected


def test_a_sharded_reader_and_an_external_source_across_epoch_ends(start_server: Start,
                                                                   image_root: Path) -> None:
    servers = fleet(start_server, 3)
    spec = sharded_with_source(str(image_root / "imgs"))
    count = 14  # 3 epochs of the shard (9 samples), 4 of the source (10, 14, 10, 14)
    expected = reference(spec, count)
    with trainer(*servers) as c:
        pipe = c.open("mixed", spec, workers=3)
        got = [batch_bytes(b) for b in run_across_epochs(pipe, count)]
        assert pipe.consumed == count  # (it stopped at each of the source's epoch ends)
        assert sorted(pipe.workers) == sorted(s.address for s in servers)
    assert got == expected


def test_auto_with_one_server_is_the_fan_in_of_one(start_server: Start,
                                                   image_root: Path) -> None:
    (server,) = fleet(start_server, 1)
    spec = rotating(image_root)
    expected = reference(spec, 12)
    with trainer(server) as c:
        pipe = c.open("alone", spec, workers="auto")
        got = [batch_bytes(pipe.run()) for _ in range(12)]
        assert pipe.workers == [server.address] and pipe.fan_in is not None
    assert got == expected


def test_a_two_rank_job_with_two_workers_per_rank(start_server: Start,
                                                  image_root: Path) -> None:
    servers = fleet(start_server, 3)
    spec = rotating(image_root)
    steps = 12
    expected = reference(spec, steps * 2)
    with trainer(*servers) as c0, trainer(*servers[1:], servers[0]) as c1:
        ranks = [c.open("job", spec, run_id="run", rank=r, world_size=2, workers=2)
                 for r, c in enumerate((c0, c1))]
        got = [batch_bytes(p.run()) for _ in range(steps) for p in ranks]
        assert all(len(p.workers) == 2 for p in ranks)
        assert [p.checkpoint().batches for p in ranks] == [steps, steps]
    assert got == expected  # the steps, ranks in order, are the one-rank sequence
