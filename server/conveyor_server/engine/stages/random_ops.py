"""Random operators as source stages: draws keyed by (seed, op, global sample index, draw).

State: the global index of the next sample. Draws for sample ``g`` never depend on which
thread, batch or prefetch depth computes them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from conveyor.definition.schemas.registry import schema_of
from conveyor.errors import CorruptCheckpoint, SpecError
from conveyor.v1 import checkpoint_pb2
from conveyor_server.engine import keyed_random
from conveyor_server.engine.ops.probes.probe_set import source_probe
from conveyor_server.engine.stages import MAX_SAMPLES

STATE_SAMPLE_INDEX = "sample_index"

# (seed, op, sample indices, draw) -> one value per sample, as float64 or int
Draw = Callable[[int, int, np.ndarray, int], np.ndarray]


def _uniform(args: Mapping[str, Any]) -> Draw:
    values = args.get("values")
    if values:
        table = np.asarray(values, dtype=np.float64)

        def pick(seed: int, op: int, idx: np.ndarray, draw: int) -> np.ndarray:
            u = keyed_random.uniform01(seed, op, idx, draw)
            return table[np.minimum((u * len(table)).astype(np.int64), len(table) - 1)]

        return pick
    lo, hi = args["range"]
    if not lo < hi:
        raise SpecError("random.uniform", "range", f"got {(lo, hi)!r}, expected low < high")

    def uniform(seed: int, op: int, idx: np.ndarray, draw: int) -> np.ndarray:
        return lo + keyed_random.uniform01(seed, op, idx, draw) * (hi - lo)

    return uniform


def _normal(args: Mapping[str, Any]) -> Draw:
    mean, std = args["mean"], args["stddev"]

    def normal(seed: int, op: int, idx: np.ndarray, draw: int) -> np.ndarray:
        return mean + std * keyed_random.normal(seed, op, idx, draw)

    return normal


def _coin_flip(args: Mapping[str, Any]) -> Draw:
    p = args["probability"]

    def flip(seed: int, op: int, idx: np.ndarray, draw: int) -> np.ndarray:
        return (keyed_random.uniform01(seed, op, idx, draw) < p).astype(np.int64)

    return flip


#: The largest ``n`` of ``random.choice(n)``: its values and their cumulative
#: probabilities are tabulated (12 bytes a value).
MAX_CHOICE_N = 1 << 20


def choice_table(args: Mapping[str, Any]) -> np.ndarray:
    """The values ``random.choice`` draws from: ``a``, or ``0 .. n-1`` for one whole
    number ``n``; int32 when every value is whole, else float32."""
    a = np.asarray(args["a"], dtype=np.float64)
    whole = bool(np.all(a == np.round(a)))
    if a.size == 1 and whole:
        if a[0] < 1:
            raise SpecError("random.choice", "a", f"got {int(a[0])}: give n >= 1 to draw from "
                            "0 .. n-1, or a list of values")
        if a[0] > MAX_CHOICE_N:
            raise SpecError("random.choice", "a", f"got {int(a[0]):,}: n may be at most "
                            f"{MAX_CHOICE_N:,} (the values are tabulated when the pipeline "
                            "is built); draw a larger index with fn.random.uniform and "
                            "fn.cast")
        return np.arange(int(a[0]), dtype=np.int32)
    if a.size == 0:
        raise SpecError("random.choice", "a", "is empty: give the values to draw from")
    return a.astype(np.int32 if whole else np.float32)


def _choice(args: Mapping[str, Any]) -> Draw:
    table = choice_table(args)
    p = args["p"]
    if p is None:
        cdf = np.arange(1, table.size + 1, dtype=np.float64) / table.size
    else:
        if len(p) != table.size:
            raise SpecError("random.choice", "p", f"has {len(p)} probabilities for "
                            f"{table.size} values: give one per value")
        if abs(sum(p) - 1.0) > 1e-4:
            raise SpecError("random.choice", "p", f"sums to {sum(p):.6g}, not 1: give "
                            "probabilities that sum to 1")
        cdf = np.cumsum(np.asarray(p, dtype=np.float64))
        cdf /= cdf[-1]

    def choose(seed: int, op: int, idx: np.ndarray, draw: int) -> np.ndarray:
        u = keyed_random.uniform01(seed, op, idx, draw)
        picked = np.minimum(np.searchsorted(cdf, u, side="right"), table.size - 1)
        return table[picked]

    return choose


DRAWS: dict[str, Callable[[Mapping[str, Any]], Draw]] = {
    "random.uniform": _uniform,
    "random.normal": _normal,
    "random.coin_flip": _coin_flip,
    "random.choice": _choice,
}


class RandomStage:
    def __init__(self, op_type: str, op_index: int, args: Mapping[str, Any], *,
                 batch_size: int, seed: int) -> None:
        self.op_type = op_type
        self.op_index = op_index
        self.batch_size = batch_size
        self.seed = seed
        self.shape = tuple(int(d) for d in args["shape"])
        self.dtype = (choice_table(args).dtype if op_type == "random.choice"
                      else np.dtype(args["dtype"]))
        self._draw = DRAWS[op_type](args)
        self._next = 0

    def reset(self, state: checkpoint_pb2.OpState | None) -> None:
        if state is None:
            self._next = 0
            return
        if state.WhichOneof("state") != "random":
            raise CorruptCheckpoint(f"op {self.op_index} ({self.op_type}): checkpoint holds a "
                                    f"{state.WhichOneof('state')} state, expected a random state")
        if state.random.sample_index > MAX_SAMPLES:
            raise CorruptCheckpoint(f"op {self.op_index} ({self.op_type}): sample index "
                                    f"{state.random.sample_index} is beyond the furthest "
                                    f"position ({MAX_SAMPLES} samples)")
        self._next = state.random.sample_index

    def get_state(self) -> checkpoint_pb2.OpState:
        return self._state(self._next)

    def _state(self, index: int) -> checkpoint_pb2.OpState:
        return checkpoint_pb2.OpState(op=self.op_index,
                                      random=checkpoint_pb2.RandomState(sample_index=index))

    def advanced(self, state: checkpoint_pb2.OpState, samples: int) -> checkpoint_pb2.OpState:
        return self._state(state.random.sample_index + samples)

    def draw(self, first: int, count: int) -> np.ndarray:
        """Values for samples ``first .. first+count-1``: shape (count, *self.shape)."""
        idx = np.arange(first, first + count, dtype=np.uint64)
        size = int(np.prod(self.shape)) if self.shape else 1
        cols = [self._draw(self.seed, self.op_index, idx, d) for d in range(size)]
        values = np.stack(cols, axis=1) if cols else np.empty((count, 0))
        return values.reshape((count, *self.shape)).astype(self.dtype)

    def next(self) -> list[np.ndarray]:
        values = self.draw(self._next, self.batch_size)
        self._next += self.batch_size
        return [values[i].copy() for i in range(self.batch_size)]


# -- behaviour probe (engine/identity/behaviour/) ------------------------------------------------


def _draws(op_type: str, args: Mapping[str, Any]) -> list[np.ndarray]:
    defaults = {name: a.default for name, a in schema_of(op_type).args.items()}
    out = []
    dtype_arg = schema_of(op_type).args.get("dtype")
    for dtype in dtype_arg.choices if dtype_arg is not None else ("",):
        stage = RandomStage(op_type, 3, {**defaults, **args, "dtype": dtype},
                            batch_size=4, seed=0x5EED)
        out += [stage.draw(0, 4096), stage.draw(2**40 + 17, 64)]
    return out


@source_probe("random.uniform")
def _probe_uniform() -> list[np.ndarray]:
    return (_draws("random.uniform", {"range": (-30.0, 30.0), "shape": (2,)})
            + _draws("random.uniform", {"values": (0.5, 1.0, 2.5)}))


@source_probe("random.normal")
def _probe_normal() -> list[np.ndarray]:
    return _draws("random.normal", {"mean": 0.5, "stddev": 2.0, "shape": (3,)})


@source_probe("random.coin_flip")
def _probe_coin_flip() -> list[np.ndarray]:
    return _draws("random.coin_flip", {"probability": 0.3})


@source_probe("random.choice")
def _probe_choice() -> list[np.ndarray]:
    return (_draws("random.choice", {"a": (5.0,), "shape": (2,)})
            + _draws("random.choice", {"a": (0.5, 1.0, 2.5, 8.0), "p": (0.1, 0.2, 0.3, 0.4)})
            + _draws("random.choice", {"a": (3.0, 7.0, 11.0), "p": (0.0, 0.5, 0.5)}))
