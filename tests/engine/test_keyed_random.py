"""Keyed random draws: accuracy of the portable log / cos, and the same bits on every SIMD
level (numpy's own np.log / np.cos are not, which is why keyed_random avoids them)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from decimal import Decimal, localcontext
from fractions import Fraction
from importlib import import_module
from types import ModuleType

import numpy as np
import pytest

from conveyor_server.engine import keyed_random as kr

N_ACCURACY = 100_000


def _ulps(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|got - ref| in units of ulp(ref); at ref == 0, in units of the smallest subnormal."""
    ulp = np.array([math.ulp(float(v)) for v in ref])
    return np.abs(got - ref) / ulp


def test_log_is_within_an_ulp_or_two_of_math_log() -> None:
    rng = np.random.default_rng(11)
    x = np.concatenate([
        rng.integers(1, 2**53, N_ACCURACY, dtype=np.int64).astype(np.float64) * 2.0**-53,
        1.0 - rng.integers(1, 2**30, 1000, dtype=np.int64) * 2.0**-53,  # near 1: log ~ x - 1
        np.exp(rng.uniform(-744.0, 0.0, 1000)),  # whole binades, subnormals included
        [2.0**-53, 1.0, 1.0 - 2.0**-53, 0.5, 0.25, 2.0**-1074, 2.0**-1022,
         float.fromhex("0x1.6a09e667f3bccp-1"), float.fromhex("0x1.6a09e667f3bcdp-1")],
    ])
    got = kr._log(x)
    ref = np.array([math.log(v) for v in x])
    assert got[-8] == 0.0  # log(1)
    assert _ulps(got, ref).max() <= 2.0
    in_normal_domain = x >= 2.0**-53  # what normal() feeds it
    assert np.abs(got - ref)[in_normal_domain].max() < 2e-14


def _cos_reference(u: float) -> float:
    """cos(2 pi u) with an exact reduction: the angle pi/2 * r as a double-double."""
    q = Fraction(u) * 4
    n = round(q)
    x = kr._PI / 2 * (q - n)
    hi = float(x)
    lo = float(x - Fraction(hi))
    c = math.cos(hi) - math.sin(hi) * lo
    s = math.sin(hi) + math.cos(hi) * lo
    return [c, -s, -c, s][n % 4]


def test_cos_two_pi_is_within_an_ulp_or_two_of_math_cos() -> None:
    rng = np.random.default_rng(12)
    special = [0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0 - 2.0**-53, 2.0**-53,
               0.25 - 2.0**-54, 0.25 + 2.0**-54, 0.125 - 2.0**-56]
    u = np.concatenate([
        rng.integers(0, 2**53, N_ACCURACY, dtype=np.int64).astype(np.float64) * 2.0**-53,
        special])
    got = kr._cos_two_pi(u)
    # math.cos(2*pi*u) carries the rounding of 2*pi*u (up to 4.4e-16 in the angle).
    loose = np.array([math.cos(2.0 * math.pi * v) for v in u])
    assert np.abs(got - loose).max() < 1e-15
    ref = np.array([_cos_reference(float(v)) for v in u])
    assert np.abs(got - ref).max() <= 2.0**-52
    nonzero = ref != 0.0
    assert _ulps(got[nonzero], ref[nonzero]).max() <= 2.0
    exact = dict(zip(special[:8], got[-len(special):][:8], strict=True))
    assert exact[0.0] == 1.0 and exact[0.5] == -1.0
    assert exact[0.25] == 0.0 and exact[0.75] == 0.0
    assert exact[0.125] == -exact[0.375] == float.fromhex("0x1.6a09e667f3bcdp-1")


def _machin_pi(digits: int) -> Fraction:
    scale = 10 ** (digits + 10)

    def arctan_inv(x: int) -> int:
        total, term, k = 0, scale // x, 1
        while term:
            total += term // k if k % 4 == 1 else -(term // k)
            term //= x * x
            k += 2
        return total

    return Fraction(16 * arctan_inv(5) - 4 * arctan_inv(239), scale)


def test_constants_are_the_digits_they_claim() -> None:
    assert abs(kr._PI - _machin_pi(70)) < Fraction(1, 10**60)
    with localcontext() as ctx:
        ctx.prec = 70
        assert abs(kr._LN2 - Fraction(Decimal(2).ln())) < Fraction(1, 10**60)
    assert math.pi / 2 == kr._HALF_PI
    assert math.log(2) == kr._LN2_HI + kr._LN2_LO
    assert float(kr._LN2_HI * 2**32).is_integer()  # e * _LN2_HI exact for any exponent e
    assert abs(Fraction(kr._LN2_HI) + Fraction(kr._LN2_LO) - kr._LN2) < Fraction(1, 2**85)


def test_draws_of_one_index_in_one_pass_are_each_draw_s_uniform01() -> None:
    rng = np.random.default_rng(5)
    keys = [(0, 0, 0), (12, 3, 1), (2**64 - 1, 2**63 + 5, 2**64 - 1), (7, 1, 2**40 + 3)]
    keys += [(int(s), int(o), int(i)) for s, o, i in rng.integers(0, 2**63, (20, 3))]
    for seed, stream, index in keys:
        got = kr.uniform01_draws(seed, stream, index, 22)
        one_by_one = [kr.uniform01(seed, stream, np.array([index], np.uint64), d)[0]
                      for d in range(22)]
        assert got.dtype == np.float64 and got.shape == (22,)
        assert got.tobytes() == np.array(one_by_one).tobytes(), (seed, stream, index)
    assert kr.uniform01_draws(1, 2, 3, 0).shape == (0,)


def test_draws_of_a_batch_at_once_are_each_index_s_draws() -> None:
    rng = np.random.default_rng(6)
    cases = [(0, 0, np.arange(64, dtype=np.uint64), 22),
             (12, 3, np.array([0, 1, 2**63 - 1, 2**63, 2**64 - 1], np.uint64), 22),
             (2**64 - 1, 2**63 + 5, rng.integers(0, 2**63, 100, dtype=np.uint64), 1),
             (7, 1, np.array([2**40 + 3], np.uint64), 5)]
    cases += [(int(s), int(o), rng.integers(0, 2**63, int(n), dtype=np.uint64), int(c))
              for s, o, n, c in zip(rng.integers(0, 2**63, 20), rng.integers(0, 2**63, 20),
                                    rng.integers(1, 130, 20), rng.integers(1, 40, 20),
                                    strict=True)]
    for seed, stream, indices, count in cases:
        got = kr.uniform01_draws_batch(seed, stream, indices, count)
        assert got.dtype == np.float64 and got.shape == (len(indices), count)
        for row, index in zip(got, indices, strict=True):
            one = kr.uniform01_draws(seed, stream, int(index), count)
            assert row.tobytes() == one.tobytes(), (seed, stream, int(index), count)
    # Python ints as indices, and the empty edges.
    assert (kr.uniform01_draws_batch(5, 6, [3, 2**64 - 1], 4).tobytes()
            == np.stack([kr.uniform01_draws(5, 6, 3, 4),
                         kr.uniform01_draws(5, 6, 2**64 - 1, 4)]).tobytes())
    assert kr.uniform01_draws_batch(1, 2, np.array([], np.uint64), 22).shape == (0, 22)
    assert kr.uniform01_draws_batch(1, 2, np.arange(3, dtype=np.uint64), 0).shape == (3, 0)


def test_normal_draws_have_mean_zero_and_unit_variance() -> None:
    z = kr.normal(5, 9, np.arange(100_000, dtype=np.uint64), draw=1)
    assert np.all(np.isfinite(z))
    assert abs(z.mean()) < 0.02
    assert abs(z.std() - 1.0) < 0.02
    assert abs(np.mean(np.abs(z) < 1.0) - 0.6827) < 0.01


def _sha(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def test_golden_draws() -> None:
    """Any change to the arithmetic of the draws changes these (and must bump the outputs)."""
    idx = np.arange(1000, dtype=np.uint64)
    assert _sha(kr.normal(7, 3, idx, 0)) == (
        "298806e74da7a5267600c276d3b6e1fc6224c12b5e3a459e7887b679d2b63d29")
    assert _sha(kr.uniform01(7, 3, idx, 0)) == (
        "01ef0675a934fd1ce4145c0a2f356e81f7dfd6ede39ed18043f1085805972a3c")


_HASH_SCRIPT = """
import hashlib, json, sys
from importlib import import_module
import numpy as np
from conveyor_server.engine import keyed_random as kr

def sha(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()

idx = np.arange(50_000, dtype=np.uint64)
hashes = {}
for draw in range(3):
    for name, fn in (("uniform01", kr.uniform01), ("normal", kr.normal), ("bits", kr.bits)):
        hashes[f"{name}/{draw}"] = sha(fn(7, 3, idx, draw))
hashes["permutation"] = sha(kr.permutation(7, 3, 50_000))
features = import_module(sys.argv[1]).__cpu_features__
print(json.dumps({"hashes": hashes, "features": {f: bool(features[f]) for f in sys.argv[2:]}}))
"""


def _umath() -> ModuleType:
    for name in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):
        try:
            return import_module(name)
        except ImportError:
            continue
    pytest.skip("numpy exposes no CPU dispatch information")


def _hashes(umath: str, features: list[str], disable: str | None) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES")}
    if disable is not None:
        env["NPY_DISABLE_CPU_FEATURES"] = disable
    done = subprocess.run([sys.executable, "-c", _HASH_SCRIPT, umath, *features], env=env,
                          capture_output=True, text=True, timeout=300, check=True)
    result: dict = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_draws_are_bit_identical_with_numpy_simd_dispatch_disabled() -> None:
    umath = _umath()
    baseline = set(umath.__cpu_baseline__)
    dispatchable = [f for f in umath.__cpu_dispatch__
                    if umath.__cpu_features__.get(f) and f not in baseline]
    if not dispatchable:
        pytest.skip("this CPU has none of numpy's optional SIMD features to disable")
    default = _hashes(umath.__name__, dispatchable, None)
    scalar = _hashes(umath.__name__, dispatchable, " ".join(dispatchable))
    assert all(default["features"].values()), default["features"]
    assert not any(scalar["features"].values()), f"numpy did not disable {scalar['features']}"
    assert default["hashes"] == scalar["hashes"]
