"""DALI's CPU tests of ``fn.transpose`` (``dali/test/python/operator_2/test_transpose.py``
in NVIDIA/DALI), ported: every permutation of 2-, 3- and 4-D random tensors against numpy,
the output layout for each of DALI's (``perm``, input layout, ``transpose_layout``,
``output_layout``) cases, and the default permutation (reversed axes), written anew
against ``conveyor.dali``.

Changed, with the reason: ``test_transpose_vs_numpy`` runs batch sizes 1, 3 and 10 over
a total volume of 1e4 (DALI: also 100, over 1e6) with all permutations of one case as the
outputs of one pipeline, to keep the run short; numpy's ``transpose`` is the reference
directly instead of a ``python_function`` pipeline. Not ported: the ``"gpu"`` cases (GPU
only).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest

from conveyor.dali import fn
from conveyor.dali.pipeline import pipeline_def


def randomly_shaped(batch_size: int, max_shape: list[int]) -> Any:
    def source(iteration: int) -> list[np.ndarray]:
        rng = np.random.default_rng(iteration)
        return [rng.integers(0, 255, [int(rng.integers(1, m + 1)) for m in max_shape])
                .astype(np.uint8) for _ in range(batch_size)]
    return source


@pytest.mark.parametrize(("batch_size", "dim"), list(itertools.product((1, 3, 10), (2, 3, 4))))
def test_transpose_vs_numpy(batch_size: int, dim: int) -> None:
    max_shape = [int(math.pow(1e4 / batch_size, 1 / dim))] * dim
    perms = list(itertools.permutations(range(dim)))

    @pipeline_def(batch_size=batch_size, num_threads=1, device_id=0)
    def pipe() -> Any:
        data = fn.external_source(randomly_shaped(batch_size, max_shape), batch=True)
        return (data, *[fn.transpose(data, perm=list(p)) for p in perms])

    p = pipe()
    p.build()
    for _ in range(3):
        data, *outs = p.run()
        for perm, out in zip(perms, outs, strict=True):
            for i in range(batch_size):
                ref = np.asarray(data.at(i)).transpose(perm)
                np.testing.assert_array_equal(np.asarray(out.at(i)), ref)


LAYOUT_CASES = [
    ((2, 0, 1), "HWC", True, None),
    ((2, 0, 1), "HWC", True, "CHW"),
    ((2, 0, 1), "HWC", False, "CHW"),
    ((1, 0, 2), None, False, None),
    ((1, 0, 2), "XYZ", True, None),
    ((1, 0, 2), None, None, "ABC"),
]


@pytest.mark.parametrize(("batch_size", "shape", "case"),
                         list(itertools.product((1, 3), ((600, 400, 3), (600, 400, 1)),
                                                           LAYOUT_CASES)))
def test_transpose_layout(batch_size: int, shape: tuple[int, ...], case: tuple[Any, ...]
                          ) -> None:
    permutation, in_layout, transpose_layout, out_layout_arg = case
    args: dict[str, Any] = {"perm": list(permutation)}
    if transpose_layout is not None:
        args["transpose_layout"] = transpose_layout
    if out_layout_arg:
        args["output_layout"] = out_layout_arg

    @pipeline_def(batch_size=batch_size, num_threads=1, device_id=0)
    def pipe() -> Any:
        data = fn.external_source(
            lambda iteration: [np.zeros(shape, np.float32) for _ in range(batch_size)],
            batch=True, **({"layout": in_layout} if in_layout else {}))
        return fn.transpose(data, **args)

    p = pipe()
    p.build()
    (out,) = p.run()
    if out_layout_arg:
        expected = out_layout_arg
    elif transpose_layout:
        expected = "".join(in_layout[d] for d in permutation)
    else:
        expected = in_layout or ""
    assert out.layout() == expected


@pytest.mark.parametrize("shape", [(10, 20, 3), (10, 20), (1,), (), (3, 3, 2, 2, 3)])
def test_transpose_default(shape: tuple[int, ...]) -> None:
    @pipeline_def(batch_size=1, num_threads=3, device_id=0)
    def pipe() -> Any:
        data = fn.random.uniform(range=[0, 255], shape=shape)
        perm = [d - 1 for d in range(len(shape), 0, -1)]
        return fn.transpose(data), fn.transpose(data, perm=perm)

    p = pipe()
    p.build()
    out_default, out_explicit = (np.asarray(o.at(0)) for o in p.run())
    np.testing.assert_array_equal(out_explicit, out_default)
    if shape:  # Conveyor's random.uniform(shape=()) gives shape (1,), DALI's a scalar
        assert out_default.shape == tuple(reversed(shape))
