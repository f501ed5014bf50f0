"""DALI's CPU tests of ``fn.random.choice`` (``dali/test/python/operator_2/
test_random_choice.py`` in NVIDIA/DALI), ported: the distribution (``test_choice_dist``),
probability 0, one element, 64-bit values, layouts, validation and enum values, written
anew against ``conveyor.dali``.

Changed, with the reason: Conveyor's ``a`` is a constant (a number ``n`` or a list): every
case of DALI's that feeds ``a`` per sample from an external source asserts Conveyor's
refusal (SPEC_ERROR naming ``a``, or ``p`` where that is fed too): the 51
``test_choice_dist`` cases, ``test_layout`` (5) and ``test_choice_64_bit_type``.
``test_choice_dist`` is also run with constant ``a`` (the
scalar and list kinds, with and without ``p``, over DALI's output shapes, a tenth of their
size): the values drawn
are the expected set and each one's frequency is within 5 standard deviations of its
probability (DALI compares with numpy's generator by a chi-square test; scipy is not a
dependency here). Where Conveyor differs, the case asserts Conveyor's documented reading:
a list of one whole number is ``n`` (``[7]`` draws from 0..6, so ``p=1.0`` is refused
naming ``p``), a float scalar ``5.0`` reads as ``n = 5`` (DALI refuses it), ``n`` above
1,048,576 is refused (DALI draws int64 below 1 << 40), and a shape given as a second
input, enum values and ``p`` outside [0, 1] are refused naming the argument. Not ported:
the ``"gpu"`` cases (none in this file).
"""

from __future__ import annotations

from itertools import chain, product
from typing import Any

import numpy as np
import pytest

from conveyor.dali import fn, types
from conveyor.dali.pipeline import pipeline_def
from conveyor.errors import SpecError

DIST_CASES = list(chain(
    product(["scalar", "0d"], [()], [True, False], [None, (), (1000,), (500, 4)], [False]),
    product(["scalar"], [()], [True], [(), (1000,), (500, 4)], [True]),
    product(["nd"], [(2,), (2, 2)], [True, False], [None, (), (1000,), (500, 4)],
            [True, False]),
))


def get_p(n: int) -> np.ndarray:
    return np.array([(i + 1) / (n * (n + 1) / 2) for i in range(n)], dtype=np.float32)


@pytest.mark.parametrize(("kind", "elem_shape", "use_p", "output_shape", "shape_like"),
                         DIST_CASES)
def test_choice_dist_per_sample_a_is_refused(kind: str, elem_shape: tuple[int, ...],
                                             use_p: bool, output_shape: Any,
                                             shape_like: bool) -> None:
    def inp(info: types.SampleInfo) -> tuple[np.ndarray, np.ndarray]:
        n = info.idx_in_batch + 5
        return np.array(n), get_p(n)

    @pipeline_def(batch_size=8, device_id=0, num_threads=4, seed=1234)
    def choice_pipe() -> Any:
        a, p = fn.external_source(inp, batch=False, num_outputs=2)
        return fn.random.choice(a, p=p if use_p else None, shape=output_shape)

    # p, when fed per sample, is refused first (also a constant argument here).
    with pytest.raises(SpecError, match=f"'{'p' if use_p else 'a'}': takes a constant, not "
                                        "an operator output"):
        choice_pipe()


@pytest.mark.parametrize(("kind", "use_p", "output_shape"),
                         list(product(["scalar", "0d"], [True, False],
                                      [None, (), (100,), (50, 4)])))
def test_choice_dist_constant_a(kind: str, use_p: bool, output_shape: Any) -> None:
    n = 7
    a: Any = n if kind == "scalar" else list(range(5, 5 + n))
    values = np.arange(n) if kind == "scalar" else np.arange(5, 5 + n)
    p = get_p(n) if use_p else None
    n_iters = 20 if output_shape in (None, ()) else 4
    batch_size = 8

    @pipeline_def(batch_size=batch_size, device_id=0, num_threads=4, seed=1234)
    def choice_pipe() -> Any:
        return fn.random.choice(a, p=p.tolist() if p is not None else None, shape=output_shape)

    pipe = choice_pipe()
    draws = []
    shape = tuple(output_shape or ())
    for _ in range(n_iters):
        (out,) = pipe.run()
        for i in range(batch_size):
            sample = np.asarray(out.at(i))
            assert sample.shape == shape
            draws.append(sample.reshape(-1))
    flat = np.concatenate(draws)
    assert set(flat.tolist()) == set(values.tolist())
    probs = p.astype(np.float64) if p is not None else np.full(n, 1 / n)
    counts = np.array([np.sum(flat == v) for v in values])
    expected = probs * flat.size
    assert np.all(np.abs(counts - expected) <= 5 * np.sqrt(expected * (1 - probs)) + 1)


def test_choice_0_prob() -> None:
    @pipeline_def(batch_size=2, device_id=0, num_threads=4, seed=1234)
    def choice_pipe() -> Any:
        return fn.random.choice(2, p=[0.0, 1.0], shape=10)

    pipe = choice_pipe()
    for _ in range(3):
        (out,) = pipe.run()
        for i in range(2):
            assert (np.asarray(out.at(i)) == np.full(10, 1)).all()


@pytest.mark.parametrize("p", [1.0, None])
def test_choice_1_elem_n(p: Any) -> None:
    @pipeline_def(batch_size=2, device_id=0, num_threads=4, seed=1234)
    def choice_pipe() -> Any:
        return fn.random.choice(1, p=p)

    pipe = choice_pipe()
    for _ in range(3):
        (out,) = pipe.run()
        for i in range(2):
            assert np.asarray(out.at(i)) == 0


def test_choice_1_elem_list_reads_as_n() -> None:
    with pytest.raises(SpecError, match="'p': has 1 probabilities for 7 values"):
        @pipeline_def(batch_size=2, device_id=0, num_threads=4, seed=1234)
        def refused() -> Any:
            return fn.random.choice(np.array([7]), p=1.0)

        refused().build()

    @pipeline_def(batch_size=2, device_id=0, num_threads=4, seed=1234)
    def choice_pipe() -> Any:
        return fn.random.choice(np.array([7]))

    pipe = choice_pipe()
    for _ in range(3):
        (out,) = pipe.run()
        assert all(0 <= int(np.asarray(out.at(i))) < 7 for i in range(2))


def test_choice_64_bit_type() -> None:
    @pipeline_def(batch_size=2, device_id=0, num_threads=4, seed=1234)
    def per_sample() -> Any:
        a = fn.external_source(lambda info: np.array(1 << 40, dtype=np.int64), batch=False)
        return fn.random.choice(a)

    with pytest.raises(SpecError, match="'a': takes a constant"):
        per_sample()

    @pipeline_def(batch_size=2, device_id=0, num_threads=4, seed=1234)
    def constant() -> Any:
        return fn.random.choice(1 << 40)

    with pytest.raises(SpecError, match="'a': got 1,099,511,627,776: n may be at most"):
        constant().build()


@pytest.mark.parametrize(("inp", "input_layout"), [
    (np.arange(3), "N"), (np.arange(3), "N"), (np.full((2, 3), 4), "NS"),
    (np.full((2, 3), 4), "NS"), (np.full((2, 3), 4), "NS"),
])
def test_layout_of_a_per_sample_input_is_refused(inp: np.ndarray, input_layout: str) -> None:
    @pipeline_def(batch_size=2, device_id=0, num_threads=4, seed=1234)
    def choice_pipe() -> Any:
        a = fn.external_source(lambda info: inp, batch=False, layout=input_layout)
        return fn.random.choice(a)

    with pytest.raises(SpecError, match="'a': takes a constant"):
        choice_pipe()


@pytest.mark.parametrize(("args", "kwargs", "message"), [
    ((1,), {"p": 1.5}, r"'p': got 1.5, expected a list of numbers, each >= 0 <= 1"),
    ((2,), {"p": 0.25}, r"'p': has 1 probabilities for 2 values"),
    ((-5,), {}, r"'a': got -5: give n >= 1"),
    ((0,), {}, r"'a': got 0: give n >= 1"),
    ((types.DALIInterpType.INTERP_CUBIC,), {}, r"'a': got 'cubic', expected a list of numbers"),
    ((5,), {"p": np.array([0.25, 0.5, 0.25])}, r"'p': has 3 probabilities for 5 values"),
    ((5, np.full((3,), 42)), {}, r"takes 0 to 1 positional input\(s\), got 2"),
])
def test_choice_validation(args: tuple[Any, ...], kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        @pipeline_def(batch_size=1, device_id=0, num_threads=4)
        def choice_pipe() -> Any:
            return fn.random.choice(*args, **kwargs)

        choice_pipe().build()


def test_a_float_scalar_reads_as_n() -> None:
    @pipeline_def(batch_size=4, device_id=0, num_threads=4, seed=1234)
    def choice_pipe() -> Any:
        return fn.random.choice(5.0)

    (out,) = choice_pipe().run()
    assert all(0 <= int(np.asarray(out.at(i))) < 5 for i in range(4))
    assert np.asarray(out.at(0)).dtype == np.int32


def test_enum_choice_is_refused() -> None:
    with pytest.raises(SpecError, match="'a': got .*expected a list of numbers"):
        @pipeline_def(batch_size=8, device_id=0, num_threads=4)
        def choice_pipeline() -> Any:
            return fn.random.choice([types.DALIInterpType.INTERP_LINEAR,
                                     types.DALIInterpType.INTERP_CUBIC], shape=[100])

        choice_pipeline().build()
