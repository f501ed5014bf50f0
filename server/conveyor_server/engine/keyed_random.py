"""Counter-based random numbers: every draw is a pure function of its key.

A draw is keyed by (seed, stream, index, draw): ``stream`` names the operator (its index
in the spec) or a use (a reader's shard and epoch), ``index`` is the global sample index or
the position in a list, ``draw`` counts draws for one sample. The same key gives the same
bits on any thread, in any order, on any machine. No global or thread-local generator.

The mixing function is SplitMix64's finaliser applied once per key component.
``KEY_SCHEDULE`` versions it: checkpoints record it and refuse a different one.
"""

from __future__ import annotations

import numpy as np

KEY_SCHEDULE = 1

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_MASK64 = (1 << 64) - 1


def _mix(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> _S30)
    x = x * _M1
    x = x ^ (x >> _S27)
    x = x * _M2
    return x ^ (x >> _S31)


def _u64(value: int) -> np.ndarray:
    return np.array([value & _MASK64], dtype=np.uint64)


def bits(seed: int, stream: int, index: np.ndarray, draw: int = 0) -> np.ndarray:
    """64 random bits for each element of ``index`` (uint64 array)."""
    h = _mix(_u64(seed) + _GOLDEN)
    h = _mix(h ^ _u64(stream))
    h = _mix(np.asarray(index, dtype=np.uint64) ^ h)
    return _mix(h ^ _u64(draw) + _GOLDEN)


def uniform01(seed: int, stream: int, index: np.ndarray, draw: int = 0) -> np.ndarray:
    """Doubles uniform in [0, 1) with 53 random bits."""
    return (bits(seed, stream, index, draw) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def normal(seed: int, stream: int, index: np.ndarray, draw: int = 0) -> np.ndarray:
    """Standard normal doubles (Box-Muller over draws 2*draw and 2*draw+1)."""
    u1 = 1.0 - uniform01(seed, stream, index, 2 * draw)  # (0, 1]
    u2 = uniform01(seed, stream, index, 2 * draw + 1)
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


def permutation(seed: int, stream: int, n: int) -> np.ndarray:
    """A uniform random permutation of range(n): positions sorted by their random keys."""
    keys = bits(seed, stream, np.arange(n, dtype=np.uint64))
    return np.argsort(keys, kind="stable").astype(np.int64)


def stream_id(*parts: int) -> int:
    """Combine small integers (op index, shard, epoch, ...) into one stream id."""
    h = _u64(len(parts))
    for part in parts:
        h = _mix(h ^ _u64(part) + _GOLDEN)
    return int(h[0])
