"""The external source's probe: what Conveyor computes around a source's callable.

A canonical pure source, in each calling convention (``batch=False`` with ``SampleInfo``;
``batch=True`` with ``BatchInfo`` and with the iteration), whose epochs end after a
different number of samples each: the positions it is asked for, the batches it gives
across ``StopIteration`` (a cut batch dropped, the next epoch started), and the positions
computed without stepping (``advanced``), which checkpoints and seeks use. The callables a
server registers are the users' code: their outputs are not probed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from conveyor.external_source import BatchInfo, SampleInfo
from conveyor_server.engine.behaviour.probe_set import source_probe
from conveyor_server.engine.stages.external_source import ExternalSourceStage

_BATCH = 4


def _samples(info: SampleInfo) -> np.ndarray:
    if info.idx_in_epoch >= 9 + 5 * info.epoch_idx:  # epochs of 9, 14, 19, ... samples
        raise StopIteration
    return np.array([info.epoch_idx, info.idx_in_epoch, info.idx_in_batch, info.iteration],
                    dtype=np.int64)


def _batches(info: Any) -> tuple[np.ndarray, list[np.ndarray]]:
    iteration, epoch = (info.iteration, info.epoch_idx) if isinstance(info, BatchInfo) \
        else (int(info), -1)
    if iteration >= 2 + (epoch % 3 if epoch >= 0 else 1):
        raise StopIteration
    first = np.full((_BATCH, 2), [epoch, iteration], dtype=np.int32)
    return first, [np.arange(i + 1, dtype=np.float32) for i in range(_BATCH)]


def _stage(batch: bool, batch_info: bool) -> ExternalSourceStage:
    args = {"batch": batch, "batch_info": batch_info, "num_outputs": 0 if not batch else 2,
            "dtype": None, "ndim": None, "layout": None}
    return ExternalSourceStage(3, "probe:source", _batches if batch else _samples, args,
                               batch_size=_BATCH)


@source_probe("external_source")
def _external_source() -> list[np.ndarray]:
    out: list[np.ndarray] = []
    for batch, batch_info in ((False, False), (True, True), (True, False)):
        stage = _stage(batch, batch_info)
        stage.reset(None)
        for _ in range(12):
            for sample in stage.next():
                out.extend(sample.get())
        fresh = _stage(batch, batch_info)
        fresh.reset(None)
        start = fresh.get_state()
        for batches in (0, 1, 2, 3, 5, 8, 13, 21):
            state = fresh.advanced(start, batches * _BATCH).external_source
            out.append(np.array([state.epoch, state.iteration], dtype=np.uint64))
    return out
