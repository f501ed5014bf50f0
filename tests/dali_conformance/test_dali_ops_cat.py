"""DALI's CPU tests of ``fn.cat`` and ``fn.stack`` (``dali/test/python/operator_1/
test_join.py`` in NVIDIA/DALI), ported: joining inputs of different lengths, with an empty
input, all empty; and ``test_cat``/``test_stack`` over 1, 2, 3 and 100 inputs, 0- to 3-D,
with and without a layout, every axis (by index or by name), against numpy's
``concatenate`` and ``stack``, with DALI's expected layouts; written anew against
``conveyor.dali``.

Changed, with the reason: DALI's constants (``types.Constant``) are fed by an external
source (Conveyor refuses ``types.Constant``, naming it); the random inputs are generated
per iteration with a volume of 1e4 per batch (DALI: 1e6) to keep the run short. The 100
input cases assert Conveyor's refusal (SPEC_ERROR naming the count: ``cat`` and ``stack``
join up to 64 inputs). One difference: stacking scalars without a layout with
``axis_name="C"`` gives DALI's layout ``"C"`` and Conveyor's none (a layout is fixed when the
pipeline is built, before the inputs' dimensions are known; without an input layout
Conveyor's ``stack`` gives none): those 3 cases assert Conveyor's empty layout. Not
ported: the ``"gpu"`` outputs (GPU only).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from conveyor.dali import fn
from conveyor.dali.pipeline import pipeline_def
from conveyor.errors import SpecError

MAX_INPUTS = 64


def _constants(*arrays: np.ndarray) -> Any:
    @pipeline_def(batch_size=1, num_threads=3, device_id=0)
    def pipe(axis: int) -> Any:
        srcs = fn.external_source(lambda iteration: tuple([a] for a in arrays),
                                  num_outputs=len(arrays), batch=True)
        return fn.cat(*srcs, axis=axis)
    return pipe


A = np.array([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]])
B = np.array([[13, 14, 15], [16, 17, 18], [19, 20, 21]])
REF = np.array([[1, 2, 3, 4, 13, 14, 15], [5, 6, 7, 8, 16, 17, 18], [9, 10, 11, 12, 19, 20, 21]])


def test_cat_different_length() -> None:
    (out,) = _constants(A, B)(axis=1).run()
    assert np.array_equal(np.asarray(out.at(0)), REF)


def test_cat_empty_input() -> None:
    empty = np.array([[], [], []], dtype=A.dtype)
    (out,) = _constants(A, empty, B)(axis=1).run()
    assert np.array_equal(np.asarray(out.at(0)), REF)


def test_cat_all_empty() -> None:
    empty = np.array([[], [], []], dtype=np.int32)
    (out,) = _constants(empty, empty, empty)(axis=1).run()
    assert np.array_equal(np.asarray(out.at(0)), empty)
    assert np.asarray(out.at(0)).shape == (3, 0)


def input_generator(num_inputs: int, batch_size: int, ndim: int,
                    variable_axis: int | None = None) -> Any:
    max_extent = 1 if ndim <= 0 else \
        math.ceil(math.pow(1e4 / (batch_size * num_inputs), 1 / ndim))

    def gen(iteration: int) -> tuple[list[Any], ...]:
        rng = np.random.default_rng(iteration)
        if ndim == 0:
            return tuple([np.float32(rng.random()) for _ in range(batch_size)]
                         for _ in range(num_inputs))
        inputs: list[list[np.ndarray]] = [[] for _ in range(num_inputs)]
        for _ in range(batch_size):
            base = rng.integers(1, max(max_extent, 2), [ndim])
            for j in range(num_inputs):
                shape = list(base)
                if variable_axis is not None:
                    shape[variable_axis] = int(rng.integers(1, 10))
                inputs[j].append(rng.random(shape).astype(np.float32))
        return tuple(inputs)

    return gen


LAYOUTS = [(None, 0), (None, 1), ("A", 1), (None, 2), ("HW", 2), (None, 3), ("DHW", 3)]
CAT_CASES = [(n, layout, ndim, axis, layout[axis] if layout else None)
             for n in (1, 2, 3, 100) for layout, ndim in LAYOUTS for axis in range(-ndim, ndim)]
STACK_CASES = [(n, layout, ndim, axis, name)
               for n in (1, 2, 3, 100) for layout, ndim in LAYOUTS
               for axis in range(-ndim, ndim + 1)
               for name in ([None] if layout is None and ndim > 0 else [None, "C"])]


def _check(outs: Any, ref: list[np.ndarray], layout: str) -> None:
    assert outs.layout() == layout
    for i, r in enumerate(ref):
        got = np.asarray(outs.at(i))
        assert got.shape == r.shape and got.dtype == r.dtype
        assert np.array_equal(got, r)


@pytest.mark.parametrize(("num_inputs", "layout", "ndim", "axis", "axis_name"), CAT_CASES)
def test_cat(num_inputs: int, layout: str | None, ndim: int, axis: int,
             axis_name: str | None) -> None:
    batch_size = 4
    ref_axis = layout.find(axis_name) if layout and axis_name else axis
    axis_arg = None if axis_name else axis

    @pipeline_def(batch_size=batch_size, num_threads=3, device_id=0)
    def pipe() -> Any:
        inputs = fn.external_source(input_generator(num_inputs, batch_size, ndim, ref_axis),
                                    num_outputs=num_inputs, batch=True,
                                    **({"layout": layout} if layout else {}))
        args = {"axis_name": axis_name} if axis_name else {"axis": axis_arg}
        return (fn.cat(*inputs, **args), *inputs)

    check_joined(pipe, num_inputs, batch_size,
                 lambda xs: np.concatenate(xs, axis=ref_axis), layout or "")


def check_joined(pipe: Any, num_inputs: int, batch_size: int,
                 join: Callable[[list[np.ndarray]], np.ndarray], layout: str) -> None:
    """Past MAX_INPUTS inputs, our refusal; else three batches, each sample the ``join``
    of the inputs' samples, with ``layout``."""
    if num_inputs > MAX_INPUTS:
        with pytest.raises(SpecError, match="64"):
            pipe()
        return
    p = pipe()
    for _ in range(3):
        out, *inputs = p.run()
        ref = [join([np.asarray(x.at(i)) for x in inputs]) for i in range(batch_size)]
        _check(out, ref, layout)


@pytest.mark.parametrize(("num_inputs", "layout", "ndim", "axis", "axis_name"), STACK_CASES)
def test_stack(num_inputs: int, layout: str | None, ndim: int, axis: int,
               axis_name: str | None) -> None:
    batch_size = 4
    if axis_name and layout:
        pos = axis + ndim + 1 if axis < 0 else axis
        ref_layout = layout[:pos] + axis_name + layout[pos:]
    else:
        ref_layout = ""  # DALI: axis_name alone for scalars (see the module's docstring)

    @pipeline_def(batch_size=batch_size, num_threads=3, device_id=0)
    def pipe() -> Any:
        inputs = fn.external_source(input_generator(num_inputs, batch_size, ndim),
                                    num_outputs=num_inputs, batch=True,
                                    **({"layout": layout} if layout else {}))
        args = {"axis_name": axis_name} if axis_name else {}
        return (fn.stack(*inputs, axis=axis, **args), *inputs)

    check_joined(pipe, num_inputs, batch_size, lambda xs: np.stack(xs, axis=axis), ref_layout)
