"""``conveyor.dali.plugin.epochs``: where an iterator stands after a number of batches
(``replay``, what a restored iterator starts from) is where counting them one by one, each
epoch reset as it ends, leads; whole periods of epochs are skipped at once."""

from __future__ import annotations

import math
import random

import pytest

from conveyor.dali.plugin.epochs import EpochCount, LastBatchPolicy, ShardCount, shard_sizes


def counter(samples: int, shards: int, batch: int, policy: LastBatchPolicy, pad: bool,
            stick: bool, pipelines: int = 1) -> EpochCount:
    """As an iterator with ``reader_name`` sets it up for the reader's metadata."""
    sizes = shard_sizes(samples, shards)
    if policy is LastBatchPolicy.DROP:
        size = samples // shards
    elif pad:
        size = math.ceil(max(sizes) / batch) * batch
    else:
        size = math.ceil(math.ceil(samples / shards) / batch) * batch
    return EpochCount(policy, batch, pipelines, size, pad,
                      ShardCount(shards, stick, list(range(pipelines)), list(sizes),
                                 list(sizes), [0] * shards))


def one_by_one(count: EpochCount, batches: int) -> EpochCount:
    taken = 0
    while True:
        if count.ended():
            count.rollover()
            continue
        if taken == batches:
            return count
        count.advance()
        taken += 1


def state(count: EpochCount) -> tuple[object, ...]:
    assert count.shards is not None
    return (count.counter, count.size, count.shards.read_ahead, count.shards.sizes,
            count.shards.shard_ids)


def test_replay_is_counting_one_by_one() -> None:
    draw = random.Random(3)
    for _ in range(300):
        samples = draw.randint(1, 60)
        shards = draw.randint(1, min(4, samples))
        pipelines = draw.randint(1, shards)
        args = (samples, shards, draw.randint(1, 9), draw.choice(list(LastBatchPolicy)),
                draw.random() < 0.5, draw.random() < 0.3, pipelines)
        batches = draw.randint(0, 3000)
        replayed = counter(*args)
        replayed.replay(batches)
        assert state(replayed) == state(one_by_one(counter(*args), batches)), (args, batches)


@pytest.mark.parametrize("policy", list(LastBatchPolicy))
def test_a_long_run_of_short_epochs_replays_by_periods(policy: LastBatchPolicy) -> None:
    """Shards shorter than a batch: every batch ends an epoch, the states repeat, and the
    replay skips whole periods to the same state."""
    args = (1000, 8, 256, policy, False, False)
    replayed = counter(*args)
    replayed.replay(20_003)
    assert state(replayed) == state(one_by_one(counter(*args), 20_003))
