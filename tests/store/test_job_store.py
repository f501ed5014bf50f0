"""The job record's scripts against a real redis-server: a job is created at step 0; the
same world joins it; another world size, an earlier step or another run starts a new
generation; a step is the cut only once every rank of the world marked it; marks of an
older generation are refused."""

from __future__ import annotations

import pytest

from conveyor.errors import FailedPrecondition, Fenced, NotFound, PermissionDenied, SpecMismatch
from conveyor_server.store.jobs import CUTS_KEPT, JobRecords
from conveyor_server.store.redis_process import RedisProcess
from conveyor_server.store.store import Store

FP = "ab" * 32


def test_generations_marks_and_cuts(redis_proc: RedisProcess) -> None:
    jobs = JobRecords(Store(redis_proc.url))
    with pytest.raises(NotFound):
        jobs.join("j", 1, None, FP, None, "me", existing_only=True)
    new = jobs.join("j", 4, "run", FP, None, "me")
    assert (new.generation, new.world_size, new.step, new.global_batches) == (1, 4, 0, 0)
    assert new.checkpoint_id == "" and new.previous_world_size == 0
    for rank in range(3):
        assert jobs.mark("j", 1, rank, 5, 20, f"j.rank-{rank}:2-x") is None
    assert jobs.mark("j", 1, 3, 5, 20, "j.rank-3:2-x") == 5  # the fourth rank: the cut
    assert jobs.mark("j", 1, 0, 6, 24, "j.rank-0:3-x") is None  # one rank of step 6

    joined = jobs.join("j", 4, "run", FP, None, "me")  # the same world: no new generation
    assert (joined.generation, joined.step, joined.global_batches) == (1, 5, 20)
    assert joined.checkpoint_id == "j.rank-3:2-x"
    later = jobs.join("j", 4, None, FP, 7, "me")  # the trainer's own step, same world
    assert (later.generation, later.step, later.global_batches) == (1, 7, 28)
    assert later.checkpoint_id == "j.rank-3:2-x"  # the newest complete step before it

    resized = jobs.join("j", 3, "run", FP, None, "me")
    assert (resized.generation, resized.world_size, resized.step, resized.global_batches,
            resized.previous_world_size) == (2, 3, 5, 20, 4)
    with pytest.raises(Fenced, match="generation 2 with 3 ranks"):
        jobs.mark("j", 1, 1, 6, 24, "j.rank-1:3-x")  # the older world's rank
    for rank in range(3):
        jobs.mark("j", 2, rank, 7, 26, f"j.rank-{rank}:9-y")  # step 7 of 3 ranks: 20 + 6
    again = jobs.join("j", 3, None, FP, None, "me")
    assert (again.generation, again.step, again.global_batches) == (2, 7, 26)
    assert (again.cut_step, again.cut_global_batches) == (7, 26)
    with pytest.raises(FailedPrecondition, match="before its current world's start"):
        jobs.join("j", 3, None, FP, 4, "me")
    rewound = jobs.join("j", 3, None, FP, 6, "me")  # before the cut: a new generation
    assert (rewound.generation, rewound.step, rewound.global_batches) == (3, 6, 23)
    assert rewound.checkpoint_id == "j.rank-3:2-x"  # the newest cut at or before batch 23

    with pytest.raises(SpecMismatch):
        jobs.join("j", 3, None, "cd" * 32, None, "me")
    with pytest.raises(PermissionDenied):
        jobs.join("j", 3, None, FP, None, "someone else")
    trial = jobs.join("j", 2, "run-2", FP, None, "")  # an operator may; a new run: step 0
    assert (trial.generation, trial.run_id, trial.step, trial.global_batches,
            trial.checkpoint_id) == (4, "run-2", 0, 0, "")


def test_only_the_newest_cuts_are_kept(redis_proc: RedisProcess) -> None:
    store = Store(redis_proc.url)
    jobs = JobRecords(store)
    jobs.join("k", 1, None, FP, None, "me")
    for step in range(1, CUTS_KEPT + 5):
        assert jobs.mark("k", 1, 0, step, step, f"k.rank-0:{step}-z") == step
    assert store._redis.zcard("conveyor:job:{k}:cuts") == CUTS_KEPT
    assert store._redis.zcard("conveyor:job:{k}:pending") == 0  # complete steps forgotten
