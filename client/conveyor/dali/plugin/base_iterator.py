"""DALI's ``nvidia.dali.plugin.base_iterator``: ``LastBatchPolicy`` and the iterator base.

``BaseIterator`` takes batches from one or several pipelines (in process or remote), ends
epochs as DALI's iterators do (by ``reader_name``, whose reader's size, sharding and
padding it reads, or by ``size``) and hands each batch to its framework's conversion.
With the data set ``[1..7]`` and batches of 2 (the padded cases with the reader's
``pad_last_batch=True``), an epoch's last batch and the next one are:

=========== ======================== ====================
policy      padded                   not padded
=========== ======================== ====================
``FILL``    ``[7, 7]``, ``[1, 2]``   ``[7, 1]``, ``[2, 3]``
``DROP``    ``[5, 6]``, ``[1, 2]``   ``[5, 6]``, ``[2, 3]``
``PARTIAL`` ``[7]``, ``[1, 2]``      ``[7]``, ``[2, 3]``
=========== ======================== ====================

A reader does not stop a Conveyor pipeline at an epoch's end (the next epoch follows), so
without ``reader_name`` or ``size`` an iterator ends its epoch only where an in-process
pipeline raises StopIteration (an ``external_source``'s callable ended its epoch, as in
DALI); a ``RemotePipeline`` raises it at the same batches (the server marks the batch
that opens an epoch), and otherwise never ends.
``checkpoints()`` are the pipelines' checkpoints at the batches the iterator has handed
out (or dropped); a batch it holds ahead (``prepare_first_batch``) is not in them. An
iterator over pipelines restored from them goes on exactly: where it stands in its epoch
follows from the pipelines' position (``epochs.EpochCount.replay``), counted from the
pipelines' start. A checkpoint taken when
an epoch has just ended resumes at the next epoch's start.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Sequence
from typing import Any

from conveyor.dali.plugin.epochs import EpochCount, LastBatchPolicy, ShardCount, shard_sizes
from conveyor.dali.plugin.pipelines import Batch, Wrapped
from conveyor.errors import CheckpointingDisabled, InvalidArgument

__all__ = ["BaseIterator", "LastBatchPolicy"]

log = logging.getLogger("conveyor.dali")


class IteratorArgumentError(InvalidArgument, ValueError):
    """An iterator argument DALI refuses with ``ValueError``; a ``ValueError`` here too."""


def auto_reset_of(value: Any) -> bool:
    if value is False or value is None or value == "no":
        return False
    if value is True or value == "yes":
        return True
    raise IteratorArgumentError(f"auto_reset={value!r}: expected True, False, None, 'yes' "
                                "or 'no'")


class BaseIterator:
    """The iterator base: epochs, resets, length and checkpoints. A framework's iterator
    implements ``_convert`` (one pipeline's batch to its tensors, cut to ``kept``
    samples where given)."""

    def __init__(self, pipelines: Any, size: int = -1, reader_name: str | None = None,
                 auto_reset: bool | str | None = False, fill_last_batch: bool | None = None,
                 last_batch_padded: bool = False,
                 last_batch_policy: LastBatchPolicy = LastBatchPolicy.FILL,
                 prepare_first_batch: bool = True) -> None:
        if pipelines is None or (isinstance(pipelines, Sequence) and not pipelines):
            raise IteratorArgumentError("pipelines: give at least one pipeline")
        pipes = list(pipelines) if isinstance(pipelines, list | tuple) else [pipelines]
        self._pipes = [Wrapped(p) for p in pipes]
        self._num_gpus = len(self._pipes)
        #: The pipelines' batch size (frameworks read it from their iterators).
        self.batch_size = self._pipes[0].batch_size
        if any(p.batch_size != self.batch_size for p in self._pipes):
            raise IteratorArgumentError(
                "pipelines: every pipeline needs the same batch size (got "
                f"{[p.batch_size for p in self._pipes]})")
        self._auto_reset = auto_reset_of(auto_reset)
        policy = self._policy(fill_last_batch, last_batch_policy)
        size = int(size)
        self._check_sizes(size, reader_name, last_batch_padded)
        if size < 0 and not reader_name:
            policy, last_batch_padded = LastBatchPolicy.FILL, False
        elif size > 0 and not reader_name:
            warnings.warn("size and last_batch_padded given without reader_name: give "
                          "reader_name, and the iterator reads both from the reader "
                          "(sharding and padding included)", Warning, stacklevel=3)
        self._reader_name = reader_name
        self._last_batch_policy = policy
        self._prepare_first_batch = prepare_first_batch
        for p in self._pipes:
            p.build()
        self._count = self._epoch_count(policy, size, bool(last_batch_padded))
        self._checkpointing = self._pipes[0].checkpointing
        if any(p.checkpointing != self._checkpointing for p in self._pipes):
            raise IteratorArgumentError("pipelines: every pipeline needs the same "
                                        "enable_checkpointing")
        start = {p.position for p in self._pipes}
        if len(start) != 1:
            raise InvalidArgument(f"pipelines: they stand at different batches {sorted(start)}"
                                  ": restore every one from the same iterator's checkpoints")
        self._restored = start.pop()
        #: Whether a pipeline raised StopIteration (an external source's epoch ended).
        self._pipes_stopped = False
        #: Batches taken from each pipeline since its start (returned, dropped or held).
        self._taken = self._restored
        self._count.replay(self._restored)
        if self._restored and self._count.next_overflows():
            self.reset()  # DROP after the epoch's last whole batch: the epoch has ended
        self._first_batch: list[Any] | None = None
        self._ever_consumed = False

    # -- arguments --------------------------------------------------------------------------

    @staticmethod
    def _policy(fill_last_batch: bool | None, policy: Any) -> LastBatchPolicy:
        if fill_last_batch is not None:
            warnings.warn("fill_last_batch is deprecated: give last_batch_policy "
                          "(LastBatchPolicy.FILL or PARTIAL)", Warning, stacklevel=4)
            return LastBatchPolicy.FILL if fill_last_batch else LastBatchPolicy.PARTIAL
        if not isinstance(policy, LastBatchPolicy):
            raise IteratorArgumentError(
                f"last_batch_policy={policy!r}: expected a LastBatchPolicy (FILL, DROP or "
                "PARTIAL, from conveyor.dali.plugin.pytorch)")
        return policy

    def _check_sizes(self, size: int, reader_name: str | None, padded: bool) -> None:
        if size == 0:
            raise IteratorArgumentError("size=0: give the samples per epoch, or -1")
        if reader_name and size > 0:
            raise IteratorArgumentError("size and reader_name exclude each other: with "
                                        "reader_name the reader gives the size")
        if reader_name and padded:
            raise IteratorArgumentError("last_batch_padded and reader_name exclude each "
                                        "other: with reader_name the reader's pad_last_batch "
                                        "says it")
        if size < 0 and not reader_name and self._num_gpus > 1:
            raise IteratorArgumentError("several pipelines need reader_name or size (without "
                                        "either, only one pipeline)")

    def _epoch_count(self, policy: LastBatchPolicy, size: int, padded: bool) -> EpochCount:
        name = self._reader_name
        if not name:
            return EpochCount(policy, self.batch_size, self._num_gpus, size, padded)
        metas = [p.reader_meta(name) for p in self._pipes]
        first = metas[0]
        for key, what in (("epoch_size", "size"), ("number_of_shards", "num_shards")):
            if any(m[key] != first[key] for m in metas):
                raise IteratorArgumentError(f"reader {name!r}: every pipeline's reader needs "
                                            f"the same {what} (got {[m[key] for m in metas]})")
        for key in ("pad_last_batch", "stick_to_shard"):
            if len({bool(m[key]) for m in metas}) != 1:
                raise IteratorArgumentError(f"reader {name!r}: {key} must be set in every "
                                            "pipeline's reader or in none")
        epoch, shards = int(first["epoch_size"]), int(first["number_of_shards"])
        padded = bool(first["pad_last_batch"])
        if policy is LastBatchPolicy.DROP:
            size = epoch // shards
        elif padded:
            size = int(first["epoch_size_padded"]) // shards
        else:
            # the largest shard, rounded up to whole batches
            size = math.ceil(math.ceil(epoch / shards) / self.batch_size) * self.batch_size
        sizes = shard_sizes(epoch, shards)
        count = ShardCount(shards, bool(first["stick_to_shard"]),
                           [int(m["shard_id"]) for m in metas], list(sizes), list(sizes),
                           [0] * shards)
        return EpochCount(policy, self.batch_size, self._num_gpus, size, padded, count)

    # -- iteration --------------------------------------------------------------------------

    def _prepare(self) -> None:
        """Take the first batch ahead, where ``prepare_first_batch`` asks for it."""
        if not self._prepare_first_batch:
            return
        try:
            self._first_batch = self._next_batch()
        except StopIteration:
            if self._restored == 0:
                raise InvalidArgument(
                    "the pipelines' epoch holds no batch for this iterator (last_batch_policy "
                    "PARTIAL or DROP with a batch larger than the shard?)") from None
        self._ever_consumed = False

    def __next__(self) -> list[Any]:
        self._ever_consumed = True
        held, self._first_batch = self._first_batch, None
        if held is not None:
            return held
        return self._next_batch()

    def next(self) -> list[Any]:
        return self.__next__()

    def _next_batch(self) -> list[Any]:
        if self._count.ended():
            self._end_epoch()
        try:
            batches = self._take()
        except StopIteration:
            self._pipes_stopped = True
            self._end_epoch()
        dropped = self._count.advance()
        if dropped:
            self._end_epoch()
        kept = self._count.kept()
        if kept is None:
            return [self._convert(i, batch, None) for i, batch in enumerate(batches)]
        return [self._convert(i, batches[i], n) for i, n in enumerate(kept)]

    def _take(self) -> list[Batch]:
        batches = [p.run() for p in self._pipes]
        self._taken += 1
        if self._reader_name or self._count.size > 0:
            for i, batch in enumerate(batches):
                short = [len(out) for out in batch if len(out) != self.batch_size]
                if short:
                    raise InvalidArgument(
                        f"pipeline {i} returned a batch of {short[0]} samples, not "
                        f"{self.batch_size}: an iterator that counts epochs (reader_name or "
                        "size) needs whole batches (a reader's on_error='skip' leaves "
                        "samples out: use 'replace')")
        return batches

    def _end_epoch(self) -> None:
        if self._auto_reset:
            self.reset()
        raise StopIteration

    def _convert(self, index: int, batch: Batch, kept: int | None) -> Any:
        raise NotImplementedError

    def __iter__(self) -> BaseIterator:
        if self._count.counter != 0 and self._ever_consumed:
            self.reset()
        return self

    def reset(self) -> None:
        """Start the next epoch, once this one has ended (before then: nothing, with a
        warning, as DALI's iterators)."""
        count = self._count
        if count.policy is LastBatchPolicy.DROP and count.next_overflows() and not count.ended():
            self._take()  # the epoch's incomplete last batch, dropped
            count.advance()
        if self._pipes_stopped:
            self._pipes_stopped = False
            for p in self._pipes:
                p.reset()
            count.rollover()
        elif count.ended() or count.size < 0:
            count.rollover()
        else:
            log.warning("conveyor.dali: reset() before the epoch's end does nothing (as "
                        "DALI's iterators)")

    # -- size -------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Samples in this epoch (per shard with ``reader_name``)."""
        return self._count.size

    @property
    def _size(self) -> int:  # DALI's scripts read it (``iterator._size``)
        return self._count.size

    def __len__(self) -> int:
        per = self.batch_size if self._reader_name else self._num_gpus * self.batch_size
        if self.size < 0:
            return 0  # no end (DALI's ceil(-1 / batch))
        if self._last_batch_policy is LastBatchPolicy.DROP:
            return self.size // per
        return math.ceil(self.size / per)

    # -- checkpoints ------------------------------------------------------------------------

    def checkpoints(self) -> list[Any]:
        """The pipelines' checkpoints at the batches taken so far, a batch held ahead
        excepted: bytes for pipelines in process, stored ``Checkpoint``s for remote ones.
        ``my_pipeline(checkpoint=it.checkpoints()[i])`` (in process) or
        ``client.restore(name, it.checkpoints()[i])`` (remote) and a new iterator over the
        restored pipelines go on exactly."""
        if not self._checkpointing:
            raise CheckpointingDisabled("the iterator's pipelines have checkpointing disabled: "
                                        "build them with enable_checkpointing=True")
        at = self._taken - (1 if self._first_batch is not None else 0)
        return [p.checkpoint(at) for p in self._pipes]
