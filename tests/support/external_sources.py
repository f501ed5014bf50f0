"""External sources the tests feed pipelines from, in process and registered on real
servers (``tests.support.external_sources:samples``, ...): pure functions of their position, with
epochs of different lengths that end with ``StopIteration``.

Batches hold ``BATCH`` samples; every value says where it came from, so a test reads the
epoch and position of each sample off the stream."""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

import numpy as np

from conveyor.definition.external_source import BatchInfo, SampleInfo

BATCH = 4


def sample_epoch_length(epoch: int) -> int:
    """Samples before ``samples`` stops epoch ``epoch``: 10, 14, 10, 14, ... (a batch of 4 is
    cut short at each end, so epochs give 2 and 3 whole batches)."""
    return 10 + 4 * (epoch % 2)


def batch_epoch_length(epoch: int) -> int:
    """Batches before ``batches`` stops epoch ``epoch``: 3, 4, 3, 4, ..."""
    return 3 + epoch % 2


def samples(info: SampleInfo) -> tuple[np.ndarray, np.ndarray]:
    """An image whose size and pixels follow the position, and (epoch, index) as a label."""
    if info.idx_in_epoch >= sample_epoch_length(info.epoch_idx):
        raise StopIteration
    seed = info.epoch_idx * 1000 + info.idx_in_epoch
    pixels = np.random.default_rng(seed).integers(0, 256, (6 + seed % 3, 5, 3), dtype=np.uint8)
    return pixels, np.array([info.epoch_idx, info.idx_in_epoch, info.idx_in_batch,
                             info.iteration], dtype=np.int32)


def batches(info: BatchInfo) -> list[np.ndarray]:
    """A batch of float32 vectors holding (epoch, iteration, sample)."""
    if info.iteration >= batch_epoch_length(info.epoch_idx):
        raise StopIteration
    return [np.array([info.epoch_idx, info.iteration, i], dtype=np.float32)
            for i in range(BATCH)]


def iterations(iteration: int) -> np.ndarray:
    """``batch=True`` without ``batch_info``: the iteration number only; epochs of 5."""
    if iteration >= 5:
        raise StopIteration
    return np.arange(BATCH * 2, dtype=np.int64).reshape(BATCH, 2) + 100 * iteration


def failing(info: BatchInfo) -> list[np.ndarray]:
    """Gives two batches, then raises."""
    if info.iteration >= 2:
        raise OSError("the feature store is unreachable")
    return [np.full(2, info.iteration, dtype=np.int16) for _ in range(BATCH)]


def windows(info: SampleInfo) -> tuple[np.ndarray, np.ndarray]:
    """Normalized (anchor, shape) in WH order for ``decoders.image_slice``; never stops."""
    k = info.idx_in_epoch
    return (np.array([0.1 * (k % 4), 0.05 * (k % 5)], dtype=np.float32),
            np.array([0.5, 0.4 + 0.1 * (k % 3)], dtype=np.float32))


def crashing(info: BatchInfo) -> list[np.ndarray]:
    """Gives two batches, then ends the process computing the third (a crash in native
    code, as a parallel source's worker would meet it)."""
    if info.iteration >= 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return [np.full(3, info.iteration, dtype=np.int32) for _ in range(BATCH)]


class Scaled:
    """A callable object: worker processes cannot import it by a name."""

    def __call__(self, info: SampleInfo) -> np.ndarray:
        return np.array([info.idx_in_epoch], dtype=np.int64)

    def method(self, info: SampleInfo) -> np.ndarray:
        return np.array([info.idx_in_epoch], dtype=np.int64)


def make_offset_source(offset: int, scale: float = 1.0,
                       tags: tuple[str, ...] = ("a",)) -> Any:
    """A closure over plain data (parallel workers rebuild it from its module and values);
    ``make_offset_source(...).<locals>.src`` is defined in two branches."""
    if scale == 1.0:
        def src(info: SampleInfo) -> np.ndarray:
            return np.array([info.idx_in_epoch + offset, len(tags)], dtype=np.int64)
    else:
        def src(info: SampleInfo) -> np.ndarray:
            return np.array([info.idx_in_epoch * scale + offset, len(tags)], dtype=np.int64)
    return src


def make_held_source(held: Scaled) -> Any:
    """A closure over an object, not plain data: parallel workers cannot rebuild it."""
    def src(info: SampleInfo) -> np.ndarray:
        return held(info)
    return src


def hanging(info: SampleInfo) -> np.ndarray:
    """Says it was called (on stderr), then never returns: a worker busy for good."""
    print("busy", file=sys.stderr, flush=True)
    threading.Event().wait()
    raise AssertionError("unreachable")
