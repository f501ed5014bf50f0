"""Where an iterator stands in its epoch: DALI's iterator arithmetic, without data.

An iterator counts the samples it has taken in the current epoch (``counter``); the epoch
ends once the count reaches ``size``. With a reader (``reader_name``) the count is per
shard, and every shard of the job is followed (``ShardCount``): the shards' sizes, which
shard each wrapped pipeline reads this epoch, and, where the last batch is filled from
the next epoch (``FILL`` without padding), how far each shard has already read into it.
Without a reader, ``size`` is what the caller said, counted over all wrapped pipelines.

``EpochCount`` is a pure state machine: ``advance`` after each batch taken, ``kept`` says
how much of a batch belongs to the epoch, ``rollover`` starts the next epoch. The
iterators drive it with real batches; ``replay`` drives it without data to find where an
iterator stands after a given number of batches from its pipelines' start (a pipeline
restored from a checkpoint), so no iterator state needs to be stored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum, unique
from typing import Any


@unique
class LastBatchPolicy(Enum):
    """What the iterator does with an epoch's last batch when the epoch does not fill it.

    ``FILL``: the batch is returned whole, filled with the reader's padding (its
    ``pad_last_batch``: the shard's last sample repeated) or with the next epoch's first
    samples. ``DROP``: the batch is not returned. ``PARTIAL``: only the epoch's samples of
    it are returned.
    """

    FILL = 0
    DROP = 1
    PARTIAL = 2


def shard_sizes(epoch_size: int, shards: int) -> list[int]:
    """Samples in each shard: shard ``k`` holds samples ``[k*N//S, (k+1)*N//S)``."""
    return [(k + 1) * epoch_size // shards - k * epoch_size // shards for k in range(shards)]


@dataclass
class ShardCount:
    """The reader's shards, as the iterator follows them."""

    shards: int
    stick_to_shard: bool
    #: The shard each wrapped pipeline reads this epoch.
    shard_ids: list[int]
    #: Samples per shard, rotated with the epochs where shards rotate (``FILL``, unpadded).
    sizes: list[int]
    #: Samples per shard, as at the start.
    initial_sizes: list[int]
    #: Per shard: samples already read into this epoch during the previous one.
    read_ahead: list[int] = field(default_factory=list)


@dataclass
class EpochCount:
    policy: LastBatchPolicy
    batch_size: int
    pipelines: int
    #: Samples per epoch (per shard with a reader); negative: the epoch never ends.
    size: int
    #: Whether the reader pads each shard's last batch (``last_batch_padded``).
    padded: bool
    shards: ShardCount | None = None
    counter: int = 0

    @property
    def step(self) -> int:
        """Samples counted per batch taken: one batch of every pipeline; with a reader, the
        count is per shard (each pipeline reads its own)."""
        return self.batch_size if self.shards is not None else self.pipelines * self.batch_size

    def ended(self) -> bool:
        return self.size > 0 and self.counter >= self.size

    def _overflows(self, counter: int) -> bool:
        """Under ``DROP``: whether a batch that brings the count to ``counter`` runs past
        the epoch (and is dropped)."""
        if self.policy is not LastBatchPolicy.DROP:
            return False
        if self.shards is not None:
            return any(ahead + counter > size for ahead, size
                       in zip(self.shards.read_ahead, self.shards.sizes, strict=True))
        return counter > self.size

    def advance(self, batches: int = 1) -> bool:
        """Count ``batches`` taken; whether the last of them is dropped (``DROP``)."""
        self.counter += batches * self.step
        return self._overflows(self.counter)

    def next_overflows(self) -> bool:
        """Whether the next batch would be dropped (``DROP``), without taking it."""
        return self._overflows(self.counter + self.step)

    def kept(self) -> list[int] | None:
        """Under ``PARTIAL``, for the batch just counted: how many samples of each
        pipeline's batch belong to the epoch (fewer entries than pipelines: the others'
        batches are not returned); None: all of them."""
        if self.policy is not LastBatchPolicy.PARTIAL:
            return None
        batch = self.batch_size
        if self.shards is not None:
            left = [batch - (self.counter - self.shards.initial_sizes[shard])
                    for shard in self.shards.shard_ids]
            if all(n >= batch for n in left):
                return None
            return [max(0, min(batch, n)) for n in left]
        if self.size <= 0 or self.counter <= self.size:
            return None
        wanted = self.step - (self.counter - self.size)
        whole = math.ceil(wanted / batch)
        return [batch] * (whole - 1) + [wanted % batch or batch]

    def rollover(self) -> None:
        """Start the next epoch (the iterator's ``reset`` at an epoch's end)."""
        fill_unpadded = self.policy is LastBatchPolicy.FILL and not self.padded
        shards = self.shards
        if fill_unpadded and shards is not None:
            # What each shard read into the next epoch: the count past its own size.
            start = min(shards.read_ahead)
            taken = self.counter - start
            shards.read_ahead = [ahead + taken - size for ahead, size
                                 in zip(shards.read_ahead, shards.sizes, strict=True)]
            self.counter = min(shards.read_ahead)
        elif fill_unpadded and self.size > 0:
            self.counter %= self.size
        else:
            self.counter = 0
        if shards is None:
            return
        if not shards.stick_to_shard:
            shards.shard_ids = [(shard + 1) % shards.shards for shard in shards.shard_ids]
        if not fill_unpadded:
            return
        if not shards.stick_to_shard:
            shards.sizes = _rolled(shards.sizes)
        left = [size - ahead for size, ahead in zip(shards.sizes, shards.read_ahead,
                                                    strict=True)]
        self.size = math.ceil(max(left) / self.batch_size) * self.batch_size
        if self.size == 0:  # every shard read all of the next epoch already: skip it
            shards.read_ahead = [0] * shards.shards
            self.counter = 0
            shards.sizes = _rolled(shards.sizes)
            self.size = math.ceil(max(shards.sizes) / self.batch_size) * self.batch_size

    def _state_key(self) -> tuple[Any, ...]:
        shards = self.shards
        if shards is None:
            return (self.counter, self.size)
        return (self.counter, self.size, tuple(shards.shard_ids), tuple(shards.sizes),
                tuple(shards.read_ahead))

    def replay(self, batches: int) -> None:
        """Stand where an iterator stands after ``batches`` batches taken from its
        pipelines' start (those it returned and those it dropped), its epochs reset as
        they ended: an epoch that ended with the last of them has been reset."""
        taken = 0
        #: Epoch starts seen (the whole state) -> batches taken by then: the states repeat
        #: with a period, and whole periods are skipped at once.
        starts: dict[tuple[Any, ...], int] | None = {}
        while True:
            if self.ended():
                self.rollover()
                if starts is not None:
                    key = self._state_key()
                    if key in starts:
                        period = taken - starts[key]
                        taken += (batches - taken) // period * period
                        starts = None  # skipped: what is left is under one period
                    else:
                        starts[key] = taken
                continue
            if taken == batches:
                return
            if self.size < 0:  # no end: count them all at once
                self.advance(batches - taken)
                return
            # Every batch before the epoch's last one is counted at once; none of them
            # ends the epoch or is dropped (both need the count at the size or past it).
            before_last = max(0, math.ceil((self.size - self.counter) / self.step) - 1)
            bulk = min(before_last, batches - taken)
            if bulk:
                self.advance(bulk)
                taken += bulk
                continue
            self.advance()
            taken += 1


def _rolled(values: list[Any]) -> list[Any]:
    """``values`` moved one place on, the last first (each shard's size goes to the
    pipeline that reads it next)."""
    return values[-1:] + values[:-1]
