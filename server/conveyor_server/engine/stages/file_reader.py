"""The file reader's order: a pure function of (seed, epoch, shard settings).

Epoch ``e`` of the reader with ``shard_id`` s reads shard ``c(e)``: ``s`` when
``stick_to_shard``, else ``(s + e) % num_shards`` (shards rotate, as DALI's readers move to
the next shard after each pass). Shard ``k`` holds files ``[k*N//S, (k+1)*N//S)`` of the
epoch's base order: the file list, or with ``shuffle_after_epoch`` one global permutation
keyed by (``shuffle_after_epoch_seed``, e) for e >= 1 (epoch 0 is unshuffled, as DALI), so
shards partition every epoch. ``random_shuffle`` permutes the shard's files uniformly,
keyed by (reader seed, reader op, shard, epoch). ``pad_last_batch`` repeats the shard's last
sample until every shard's epoch is the largest shard's size rounded up to whole batches.
Without padding, a batch straddles the epoch boundary.

State: (epoch, position in the epoch). No permutation is ever stored.

Every reader orders its samples this way (DALI's readers share one loader): the numpy and
webdataset readers are this stage over their sample lists, named by ``op_type``.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from conveyor.errors import CorruptCheckpoint, SpecError
from conveyor.v1 import checkpoint_pb2
from conveyor_server.engine import keyed_random
from conveyor_server.engine.stages import MAX_SAMPLES

STATE_EPOCH = "epoch"
STATE_POSITION = "position"

_SHUFFLE_AFTER_EPOCH_STREAM = 0x5AE


class FileReaderStage:
    def __init__(
        self,
        op_index: int,
        num_files: int,
        *,
        batch_size: int,
        seed: int,
        num_shards: int = 1,
        shard_id: int = 0,
        stick_to_shard: bool = False,
        pad_last_batch: bool = False,
        random_shuffle: bool = False,
        shuffle_after_epoch: bool = False,
        shuffle_after_epoch_seed: int = 524287,
        op_type: str = "readers.file",
        unit: str = "files",
    ) -> None:
        op = op_type
        if shard_id >= num_shards:
            raise SpecError(op, "shard_id", f"got {shard_id}, expected < num_shards ({num_shards})")
        if num_files < num_shards:
            raise SpecError(op, "num_shards", f"got {num_shards}, but there are only "
                            f"{num_files} {unit}")
        if random_shuffle and shuffle_after_epoch:
            raise SpecError(op, "shuffle_after_epoch", "cannot be combined with random_shuffle")
        self.op_index = op_index
        self.op_type = op_type
        self.num_files = num_files
        self.batch_size = batch_size
        self.seed = seed
        self.num_shards = num_shards
        self.shard_id = shard_id
        self.stick_to_shard = stick_to_shard
        self.pad_last_batch = pad_last_batch
        self.random_shuffle = random_shuffle
        self.shuffle_after_epoch = shuffle_after_epoch
        self.shuffle_after_epoch_seed = shuffle_after_epoch_seed
        bounds = [k * num_files // num_shards for k in range(num_shards + 1)]
        self._bounds = bounds
        largest = max(bounds[k + 1] - bounds[k] for k in range(num_shards))
        self._padded_length = -(-largest // batch_size) * batch_size
        self._orders: OrderedDict[int, np.ndarray] = OrderedDict()
        self._epoch = 0
        self._position = 0

    # -- the order, as pure functions of the epoch --------------------------------------

    def shard_of(self, epoch: int) -> int:
        if self.stick_to_shard:
            return self.shard_id
        return (self.shard_id + epoch) % self.num_shards

    def shard_size(self, shard: int) -> int:
        return self._bounds[shard + 1] - self._bounds[shard]

    def epoch_length(self, epoch: int) -> int:
        if self.pad_last_batch:
            return self._padded_length
        return self.shard_size(self.shard_of(epoch))

    def order(self, epoch: int) -> np.ndarray:
        """File indices of one epoch, padding included."""
        cached = self._orders.get(epoch)
        if cached is not None:
            return cached
        shard = self.shard_of(epoch)
        start, end = self._bounds[shard], self._bounds[shard + 1]
        if self.shuffle_after_epoch and epoch > 0:
            stream = keyed_random.stream_id(_SHUFFLE_AFTER_EPOCH_STREAM, epoch)
            base = keyed_random.permutation(self.shuffle_after_epoch_seed, stream, self.num_files)
            part = base[start:end]
        else:
            part = np.arange(start, end, dtype=np.int64)
        if self.random_shuffle:
            stream = keyed_random.stream_id(self.op_index, shard, epoch)
            part = part[keyed_random.permutation(self.seed, stream, len(part))]
        if self.pad_last_batch and len(part) < self._padded_length:
            pad = np.full(self._padded_length - len(part), part[-1], dtype=np.int64)
            part = np.concatenate([part, pad])
        self._orders[epoch] = part
        while len(self._orders) > 2:  # a batch spans at most two epochs... or many tiny ones
            self._orders.popitem(last=False)
        return part

    # -- the stage contract ------------------------------------------------------------

    def reset(self, state: checkpoint_pb2.OpState | None) -> None:
        if state is None:
            self._epoch, self._position = 0, 0
            return
        if state.WhichOneof("state") != "reader":
            raise CorruptCheckpoint(f"op {self.op_index} ({self.op_type}): checkpoint holds a "
                                    f"{state.WhichOneof('state')} state, expected a reader state")
        epoch, position = state.reader.epoch, state.reader.position
        if epoch > MAX_SAMPLES:
            raise CorruptCheckpoint(f"op {self.op_index} (readers.file): epoch {epoch} is "
                                    f"beyond the furthest position ({MAX_SAMPLES} samples)")
        if position >= self.epoch_length(epoch):
            raise CorruptCheckpoint(
                f"op {self.op_index} ({self.op_type}): position {position} is beyond epoch "
                f"{epoch}'s length {self.epoch_length(epoch)}")
        self._epoch, self._position = epoch, position

    def get_state(self) -> checkpoint_pb2.OpState:
        return self._state(self._epoch, self._position)

    def _state(self, epoch: int, position: int) -> checkpoint_pb2.OpState:
        return checkpoint_pb2.OpState(
            op=self.op_index, reader=checkpoint_pb2.ReaderState(epoch=epoch, position=position))

    def next(self) -> list[int]:
        """File indices of the next batch."""
        out: list[int] = []
        while len(out) < self.batch_size:
            order = self.order(self._epoch)
            take = min(self.batch_size - len(out), len(order) - self._position)
            out.extend(order[self._position:self._position + take].tolist())
            self._position += take
            if self._position == len(order):
                self._epoch, self._position = self._epoch + 1, 0
        return out

    def advanced(self, state: checkpoint_pb2.OpState, samples: int) -> checkpoint_pb2.OpState:
        epoch, left = state.reader.epoch, state.reader.position + samples
        # Epoch lengths repeat with the shard rotation's period: skip whole periods at once.
        period = 1 if (self.stick_to_shard or self.pad_last_batch) else self.num_shards
        cycle = sum(self.epoch_length(epoch + i) for i in range(period))
        whole = left // cycle
        epoch, left = epoch + whole * period, left - whole * cycle
        while left >= self.epoch_length(epoch):
            left -= self.epoch_length(epoch)
            epoch += 1
        return self._state(epoch, left)

    def meta(self) -> dict[str, int | bool]:
        padded = self.num_shards * (self._padded_length if self.pad_last_batch
                                    else -(-self.num_files // self.num_shards))
        return {
            "epoch_size": self.num_files,
            "epoch_size_padded": padded,
            "number_of_shards": self.num_shards,
            "shard_id": self.shard_id,
            "pad_last_batch": self.pad_last_batch,
            "stick_to_shard": self.stick_to_shard,
        }
