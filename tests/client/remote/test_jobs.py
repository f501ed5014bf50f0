"""Data-parallel jobs with real servers and a real Redis: rank r of N takes the r-th of
every step's N batches of the one-rank sequence; every rank checkpointing a step makes it
the job's cut; the job goes on from the cut with any world size (4 -> 3, 2 -> 5), each
rank on another server, every sample of an epoch delivered once, and the streams of the
older world fenced."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import conveyor
from conveyor import errors
from conveyor.cli import main as cli
from conveyor_server.demo.run import rotate_pipeline
from tests.support.resume import batch_bytes, reference
from tests.support.servers import ServerProcess, Start, client

#: 18 images in batches of 2: an epoch is 9 global batches, so steps straddle epochs.
BATCH = 2
EPOCH_BATCHES = 9


#: Returns the client it is given, to be closed when the test ends (the ``closing`` fixture).
Closing = Callable[[conveyor.Client], conveyor.Client]


@pytest.fixture
def closing(start_server: Start) -> Iterator[Closing]:
    """Clients handed to it are closed when the test ends, before its servers stop (set up
    after ``start_server``, it is torn down before it), as a trainer's are when it ends: a
    stream left open and unread holds a server's SIGTERM drain for its whole grace."""
    clients: list[conveyor.Client] = []

    def keep(c: conveyor.Client) -> conveyor.Client:
        clients.append(c)
        return c

    yield keep
    for c in clients:
        c.close()


def spec_of(image_root: Path) -> Any:
    return rotate_pipeline(str(image_root / "imgs"), batch_size=BATCH)


def open_rank(closing: Closing, servers: list[ServerProcess], spec: Any, rank: int,
              world: int, *, run_id: str | None = "run-1",
              consumed: int | None = None) -> conveyor.RemotePipeline:
    """Rank ``rank`` of a world, talking to server rank % len(servers)."""
    return closing(client(servers[rank % len(servers)])).open(
        "job", spec, run_id=run_id, rank=rank, world_size=world, consumed=consumed)


def open_world(closing: Closing, servers: list[ServerProcess], spec: Any, world: int, *,
               run_id: str | None = "run-1",
               consumed: int | None = None) -> list[conveyor.RemotePipeline]:
    """Every rank of a world, rank r talking to server r % len(servers)."""
    return [open_rank(closing, servers, spec, r, world, run_id=run_id, consumed=consumed)
            for r in range(world)]


def run_steps(pipes: list[conveyor.RemotePipeline], count: int) -> list[Any]:
    """``count`` steps of every rank: their batches, each step's in rank order."""
    return [batch_bytes(p.run()) for _ in range(count) for p in pipes]


def sample_labels(batches: list[Any]) -> list[bytes]:
    return [label for batch in batches for (_, _, label) in batch[1]]


def assert_fenced(pipe: conveyor.RemotePipeline) -> None:
    """The pipe's stream ends with an error, after the batches its server had sent ahead
    (gRPC's flow-control window holds dozens of these small ones)."""
    with pytest.raises((errors.FailedPrecondition, errors.NotFound)):
        for _ in range(2000):
            pipe.run()


def test_elastic_resume_four_to_three_ranks_on_two_servers(
        closing: Closing, start_server: Start, image_root: Path) -> None:
    servers = [start_server(), start_server()]
    spec = spec_of(image_root)
    expected = reference(spec, 4 * 3 + 3 * 6)
    four = open_world(closing, servers, spec, 4)
    assert [p.via for p in four] == [servers[r % 2].address for r in range(4)]
    assert [p.name for p in four] == [f"job.rank-{r}" for r in range(4)]
    history = run_steps(four, 3)
    cut = [p.checkpoint() for p in four]  # step 3 on every rank: the job's cut
    assert {c.batches for c in cut} == {3}
    run_steps(four, 2)  # consumed past the cut, then the whole job stops

    # Resized: from the cut, step 3 = global batch 12. Once the first rank of the new
    # world joined, the older world's checkpoints no longer count.
    three = [open_rank(closing, servers, spec, 0, 3)]
    with pytest.raises(errors.Fenced, match="went on without this rank"):
        four[2].checkpoint()
    three += [open_rank(closing, servers, spec, r, 3) for r in (1, 2)]
    assert [p.consumed for p in three] == [3, 3, 3]
    assert [p.info.job.global_batches for p in three] == [12, 12, 12]
    history += run_steps(three, 6)
    assert history == expected  # the one-rank job's sequence, byte for byte
    # Over every epoch (9 batches: 3 with four ranks, then in steps of three), each sample
    # once: the labels of each epoch are a permutation of the data set's.
    labels = sample_labels(history)
    per_epoch = EPOCH_BATCHES * BATCH
    for e in range(len(labels) // per_epoch):
        assert sorted(labels[e * per_epoch:(e + 1) * per_epoch]) == sorted(labels[:per_epoch])
    # The older world's streams are fenced: rank 0's name was taken by the new rank 0, and
    # rank 3 is released (the job has no rank 3 now); neither goes on.
    assert_fenced(four[0])
    assert_fenced(four[3])
    for p in three:
        p.close()


def test_elastic_resume_two_to_five_after_a_partial_checkpoint(
        closing: Closing, start_server: Start, image_root: Path) -> None:
    servers = [start_server(), start_server()]
    spec = spec_of(image_root)
    expected = reference(spec, 2 * 2 + 5 * 4)
    two = open_world(closing, servers, spec, 2)
    history = run_steps(two, 2)
    for p in two:
        p.checkpoint()  # step 2 on both: the cut
    run_steps(two, 2)
    two[0].checkpoint()  # step 4 on rank 0 only: the job dies before rank 1's
    five = open_world(closing, servers, spec, 5)
    assert [p.consumed for p in five] == [2] * 5  # the latest step both ranks checkpointed
    history += run_steps(five, 4)
    assert history == expected
    assert_fenced(two[1])


def test_a_job_resumes_with_the_same_world_and_a_new_run_starts_afresh(
        closing: Closing, start_server: Start, image_root: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    servers = [start_server(), start_server()]
    spec = spec_of(image_root)
    expected = reference(spec, 12)
    first = open_world(closing, servers, spec, 2)
    run_steps(first, 2)
    for p in first:
        p.checkpoint()
    run_steps(first, 1)
    again = open_world(closing, servers, spec, 2)  # a restart of the same run, same world
    assert [p.consumed for p in again] == [2, 2]
    assert run_steps(again, 1) == expected[4:6]
    assert_fenced(first[0])
    counted = open_world(closing, servers, spec, 2, consumed=3)  # the trainer's own step
    assert run_steps(counted, 1) == expected[6:8]
    alone = closing(client(servers[1])).open("job", spec, run_id="run-1")  # resized to one rank
    # Where the last world started (step 3) is a cut: every rank stood there.
    assert alone.name == "job.rank-0" and alone.consumed == 3
    assert [batch_bytes(alone.run()) for _ in range(2)] == expected[6:8]
    trial = open_world(closing, servers, spec, 2, run_id="run-2")  # continue-trial: step 0
    assert [p.consumed for p in trial] == [0, 0]
    assert run_steps(trial, 2) == expected[:4]
    assert trial[0].describe().run_id == "run-2"
    assert cli(["--server", servers[1].address, "describe", "job.rank-1"]) == 0
    assert ("job:           job: rank 1 of 2 (generation 3), from step 0 at global batch 0"
            in capsys.readouterr().out)


def test_ranks_and_specs_are_checked(start_server: Start, image_root: Path) -> None:
    server = start_server()
    spec = spec_of(image_root)
    with client(server) as c:
        with pytest.raises(errors.InvalidArgument, match="rank: got 2, expected 0..1"):
            c.open("checked", spec, rank=2, world_size=2)
        with pytest.raises(errors.InvalidArgument, match="world_size: got 0"):
            c.open("checked", spec, world_size=0)
        c.open("checked", spec, rank=0, world_size=2)
        other = rotate_pipeline(str(image_root / "imgs"), batch_size=3)
        with pytest.raises(errors.SpecMismatch, match="another spec"):
            c.open("checked", other, rank=1, world_size=2)


def test_a_rank_fails_over_within_its_world_and_not_into_a_newer_one(
        closing: Closing, start_server: Start, image_root: Path) -> None:
    a, b = start_server(), start_server()
    spec = spec_of(image_root)
    expected = reference(spec, 10)
    ranks = [closing(conveyor.Client([a.address, b.address], timeout=10, place=False)).open(
        "job", spec, run_id="run-1", rank=r, world_size=2) for r in range(2)]
    assert {p.via for p in ranks} == {a.address}
    history = run_steps(ranks, 2)
    a.kill()  # both ranks' server dies: each goes on on B from its own step
    history += run_steps(ranks, 2)
    assert history == expected[:8]
    assert [p.failovers for p in ranks] == [1, 1] and {p.via for p in ranks} == {b.address}
    for p in ranks:
        p.checkpoint()  # step 4: the cut, written on B
    one = closing(client(b)).open("job", spec, run_id="run-1")  # the job goes on with one rank
    assert one.consumed == 4 and batch_bytes(one.run()) == expected[8]
    # The older world's rank 1 cannot take its pipeline back by a failover restore.
    with pytest.raises(errors.Fenced, match="went on without this rank's world"):
        closing(client(b)).resume("job.rank-1", 4)


def test_a_resized_rank_fails_over_from_its_own_worlds_checkpoints(
        closing: Closing, start_server: Start, image_root: Path) -> None:
    """Rank 0's pipeline keeps the older world's checkpoints, one of them past the cut the
    new world started from: a failover of the new rank 0 resumes from the new world's."""
    a, b = start_server(), start_server()
    spec = spec_of(image_root)
    expected = reference(spec, 2 * 3 + 3 * 5)

    def world(size: int) -> list[conveyor.RemotePipeline]:
        return [closing(conveyor.Client([a.address, b.address], timeout=10, place=False)).open(
            "job", spec, run_id="run-1", rank=r, world_size=size) for r in range(size)]

    two = world(2)
    history = run_steps(two, 3)
    for p in two:
        p.checkpoint()  # step 3: the cut
    run_steps(two, 2)
    two[0].checkpoint()  # step 5 on rank 0 only; then the job stops
    three = world(3)
    assert [p.consumed for p in three] == [3, 3, 3] and {p.via for p in three} == {a.address}
    history += run_steps(three, 3)
    a.kill()  # every rank goes on on B from its own step, 6
    history += run_steps(three, 2)
    assert history == expected
    assert [p.failovers for p in three] == [1, 1, 1]
