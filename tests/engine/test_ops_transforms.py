"""``fn.transforms.*``: DALI's matrices (values DALI 2.4 gave on the CPU), composition
orders, per-sample arguments keyed by sample, and the refusals that name what is wrong."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from conveyor import fn, pipeline_def
from conveyor.errors import InvalidArgument, SpecError
from conveyor_server import Pipeline
from tests.support.resume import assert_resume_exact, assert_same_stream, run_batches


def _one(make: Any) -> np.ndarray:
    @pipeline_def(batch_size=1, num_threads=1, seed=1)
    def pipe() -> Any:
        return make()
    with Pipeline(pipe()) as p:
        (out,) = p.run()
    return np.asarray(out[0])


def _rows(m: Any) -> list[list[float]]:
    return np.asarray(m, dtype=np.float32).tolist()


# DALI 2.4's outputs on the CPU for the same definitions.
DALI = {
    "combine": [[2.0, 0.0, 2.0], [0.0, 3.0, 6.0]],
    "combine_rev": [[2.0, 0.0, 1.0], [0.0, 3.0, 2.0]],
    "scale_ndim_center": [[2.0, 0.0, -1.0], [0.0, 2.0, -3.0]],
    "scale_input": [[2.0, 0.0, 2.0], [0.0, 2.0, 4.0]],
    "rotation_center": [[0.8660253882408142, -0.5, 11.339746475219727],
                        [0.5, 0.8660253882408142, -2.320507049560547]],
    "rotation_3d": [[0.875594973564148, -0.381752610206604, 0.29597008228302, 0.0],
                    [0.4200310707092285, 0.9043037295341492, -0.07621292769908905, 0.0],
                    [-0.23855239152908325, 0.19104830920696259, 0.9521518349647522, 0.0]],
    "shear_center": [[1.0, 0.5, -2.0], [0.25, 1.0, -0.75]],
    "shear_3d": [[1.0, 1.0, 2.0, 0.0], [3.0, 1.0, 4.0, 0.0], [5.0, 6.0, 1.0, 0.0]],
    "crop": [[0.009999999776482582, 0.0, -0.09999999403953552],
             [0.0, 0.004999999888241291, -0.09999999403953552]],
}


def test_matrices_are_dalis() -> None:
    t = fn.transforms
    got = {
        "combine": _one(lambda: t.combine(t.translation(offset=[1, 2]), t.scale(scale=[2, 3]))),
        "combine_rev": _one(lambda: t.combine(t.translation(offset=[1, 2]),
                                              t.scale(scale=[2, 3]), reverse_order=True)),
        "scale_ndim_center": _one(lambda: t.scale(scale=2.0, ndim=2, center=[1.0, 3.0])),
        "scale_input": _one(lambda: t.scale(t.translation(offset=[1, 2]), scale=2.0)),
        "rotation_center": _one(lambda: t.rotation(angle=30.0, center=[10.0, 20.0])),
        "rotation_3d": _one(lambda: t.rotation(angle=30.0, axis=[1.0, 2.0, 3.0])),
        "shear_center": _one(lambda: t.shear(shear=[0.5, 0.25], center=[3.0, 4.0])),
        "shear_3d": _one(lambda: t.shear(shear=[1, 2, 3, 4, 5, 6])),
        "crop": _one(lambda: t.crop(from_start=[10.0, 20.0], from_end=[110.0, 220.0])),
    }
    for name, expected in DALI.items():
        assert got[name].dtype == np.float32, name
        assert _rows(got[name]) == _rows(expected), name


def test_layouts_and_composition_orders() -> None:
    t = fn.transforms
    assert _one(lambda: t.translation(offset=3.0)).shape == (1, 2)
    assert _one(lambda: t.translation(offset=[1.0, 2.0, 3.0])).shape == (3, 4)
    assert _rows(_one(t.crop)) == [[1.0, 0.0]]
    after = _one(lambda: t.translation(t.scale(scale=[2.0, 3.0]), offset=[1, 2]))
    before = _one(lambda: t.translation(t.scale(scale=[2.0, 3.0]), offset=[1, 2],
                                        reverse_order=True))
    assert _rows(after) == [[2.0, 0.0, 1.0], [0.0, 3.0, 2.0]]  # scale, then translate
    assert _rows(before) == [[2.0, 0.0, 2.0], [0.0, 3.0, 6.0]]  # translate, then scale
    # cos(90 degrees in float32 radians) is not 0 in float32: DALI's matrix is not snapped
    quarter = _one(lambda: t.rotation(angle=90.0))
    assert quarter[0, 1] == -1.0 and 0 < abs(quarter[0, 0]) < 1e-7


@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda t: t.shear(), SpecError, "give exactly one of 'shear'"),
    (lambda t: t.shear(shear=[1.0, 2.0], angles=[1.0, 2.0]), SpecError, "exactly one"),
    (lambda t: t.shear(angles=[95.0, 0.0]), InvalidArgument, "between -90 and 90"),
    (lambda t: t.scale(scale=2.0, center=[1.0, 3.0]), InvalidArgument,
     "'center' has 2 values, but the transform has 1 dimensions"),
    (lambda t: t.rotation(t.translation(offset=[1.0, 2.0, 3.0]), angle=10.0),
     InvalidArgument, "input matrix describes a 3D transform but the arguments describe a 2D"),
])
def test_bad_arguments_are_refused_naming_them(make: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        _one(lambda: make(fn.transforms))


def test_combine_takes_two_to_ninety_nine_inputs() -> None:
    with pytest.raises(SpecError, match="takes 2 to 99 positional input"):
        _one(lambda: fn.transforms.combine(fn.transforms.translation(offset=[1.0, 2.0])))
    with pytest.raises(SpecError, match="takes 0 or 1 positional input"):
        m = fn.transforms.translation  # two inputs to a one-input transform
        _one(lambda: m(m(offset=[1.0]), m(offset=[1.0]), offset=[1.0]))


@pipeline_def(batch_size=4, num_threads=2, seed=5, enable_checkpointing=True)
def random_matrices() -> Any:
    angle = fn.random.uniform(range=(-45.0, 45.0))
    shift = fn.random.uniform(range=(-8.0, 8.0), shape=(2,))
    rotate = fn.transforms.rotation(angle=angle, center=[16.0, 16.0])
    matrix = fn.transforms.translation(rotate, offset=shift)
    image = fn.random.normal(shape=(6, 5, 3))
    stats = fn.reductions.mean(image, axes=(0, 1))
    return matrix, stats, fn.reductions.std_dev(image, stats, axes=(0, 1))


def test_random_arguments_resume_exactly_and_ignore_threads() -> None:
    spec = random_matrices()
    assert_resume_exact(spec, 3, 4)
    other = random_matrices(num_threads=1, prefetch_queue_depth=3)
    with Pipeline(spec) as a, Pipeline(other) as b:
        assert_same_stream(run_batches(a, 5), run_batches(b, 5), "threads and prefetch")
    with Pipeline(spec) as p:
        matrices, means, stds = p.run()
    assert matrices[0].shape == (2, 3) and matrices.dtype == np.float32
    assert means[0].shape == (3,) and stds[0].shape == (3,)
    assert len({np.asarray(m).tobytes() for m in matrices}) == 4  # a draw per sample
