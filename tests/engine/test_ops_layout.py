"""transpose, reshape, cat and stack against numpy, with DALI's cases: the layouts they
give (DALI 2.4's, checked against it by ``scripts/compare_dali_everyday.py``), wildcard and
relative shapes, ``src_dims``, named axes, and the errors that name the argument."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from conveyor import fn, pipeline_def
from conveyor.errors import InvalidArgument
from conveyor_server.engine import catalog
from tests.support.op_helpers import build, noise, run


@pytest.fixture(scope="module", autouse=True)
def loaded() -> None:
    catalog.load()


def joined(op_type: str, inputs: Sequence[np.ndarray], layouts: tuple[str, ...] | None = None,
           **args: Any) -> tuple[np.ndarray, str]:
    op = build(op_type, input_layouts=layouts or ("HWC",) * len(inputs), **args)
    (out,) = op.fn(list(inputs), {})
    assert out.flags.c_contiguous and not any(np.shares_memory(out, x) for x in inputs)
    return out, op.layouts[0]


@pytest.mark.parametrize(("args", "axes", "layout"), [
    ({"perm": [2, 0, 1]}, (2, 0, 1), "CHW"),
    ({}, (2, 1, 0), "CWH"),
    ({"perm": [1, 0, 2], "transpose_layout": False}, (1, 0, 2), "HWC"),
    ({"perm": [0, 2, 1], "output_layout": "ABC"}, (0, 2, 1), "ABC"),
])
def test_transpose(args: dict[str, Any], axes: tuple[int, ...], layout: str) -> None:
    image = noise(5, 7, seed=1)
    op = build("transpose", **args)
    assert np.array_equal(run(op, image), np.transpose(image, axes))
    assert op.layouts == (layout,)


def test_transpose_refuses_a_perm_that_is_not_a_permutation() -> None:
    with pytest.raises(InvalidArgument, match="'perm' \\[0, 0, 1\\] is not a permutation"):
        build("transpose", perm=[0, 0, 1])
    op = build("transpose", perm=[1, 0], input_layouts=("",))
    with pytest.raises(InvalidArgument, match="'perm'.*3 axes of the input"):
        run(op, noise(3, 4))


@pytest.mark.parametrize(("args", "shape", "layout"), [
    ({"shape": [6, 4, 3]}, (6, 4, 3), "HWC"),       # same number of dimensions: kept
    ({"shape": [-1, 3]}, (24, 3), ""),
    ({"rel_shape": [0.5, -1]}, (2, 36), ""),
    ({"rel_shape": [0.5, 2, 1]}, (2, 12, 3), "HWC"),
    ({"rel_shape": [1, 1, 1, -1]}, (4, 6, 3, 1), ""),  # a last wildcard adds a dimension
    ({"src_dims": [2, 0, 1]}, (3, 4, 6), "HWC"),
    ({"src_dims": [-1, 0, 1, 2], "layout": "FHWC"}, (1, 4, 6, 3), "FHWC"),
    ({"src_dims": [2, 0, 1], "rel_shape": [2.0, 0.5, 1.0]}, (6, 2, 6), "HWC"),
])
def test_reshape_shapes_and_layouts(args: dict[str, Any], shape: tuple[int, ...],
                                    layout: str) -> None:
    image = noise(4, 6, seed=2)
    op = build("reshape", **args)
    out = run(op, image)
    assert out.shape == shape and op.layouts == (layout,)
    assert np.array_equal(out.reshape(-1), image.reshape(-1))  # the same values, in order


def test_reshape_dali_src_dims_example() -> None:
    # DALI's: [300, 200, 1] with src_dims [-1, 1, 0] is [1, 200, 300]; rel_shape [-1, 0.5, 2]
    # on top gives [1, 100, 600].
    data = np.arange(300 * 200, dtype=np.int32).reshape(300, 200, 1)
    assert run(build("reshape", src_dims=[-1, 1, 0], input_layouts=("",)), data).shape == \
        (1, 200, 300)
    assert run(build("reshape", src_dims=[-1, 1, 0], rel_shape=[-1, 0.5, 2],
                     input_layouts=("",)), data).shape == (1, 100, 600)


def test_reshape_shape_fed_per_sample_and_errors() -> None:
    op = build("reshape", tensor_args=("shape",))
    image = noise(4, 6, seed=3)
    assert run(op, image, shape=np.array([8, -1], np.int32)).shape == (8, 9)
    assert op.layouts == ("",)
    with pytest.raises(InvalidArgument, match="holds 70 values.*72"):
        run(op, image, shape=np.array([7, 10], np.int32))
    with pytest.raises(InvalidArgument, match="more than one negative"):
        run(build("reshape", shape=[-1, -1]), image)
    with pytest.raises(InvalidArgument, match="'src_dims' names dimension 3"):
        run(build("reshape", src_dims=[3, 0]), image)
    with pytest.raises(InvalidArgument, match="'shape' and 'rel_shape' are both given"):
        build("reshape", shape=[72], rel_shape=[1.0])


def test_fn_reshape_takes_the_shape_as_a_second_input() -> None:
    @pipeline_def(batch_size=2, seed=1)
    def two() -> Any:
        data = fn.random.uniform(shape=(4, 6))
        return fn.reshape(data, fn.random.uniform(values=[24.0], shape=(1,)))

    reshape = two().spec.ops[-1]
    assert reshape.type == "reshape" and "shape" in reshape.arg_inputs


def test_cat_along_an_axis_index_or_name() -> None:
    a, b, c = noise(3, 4, seed=1), noise(5, 4, seed=2), noise(3, 2, seed=3)
    out, layout = joined("cat", [a, b])
    assert np.array_equal(out, np.concatenate([a, b])) and layout == "HWC"
    out, _ = joined("cat", [a, c, a], axis_name="W")
    assert np.array_equal(out, np.concatenate([a, c, a], axis=1))
    out, _ = joined("cat", [a, a[..., :1]], axis=-1)
    assert out.shape == (3, 4, 4)
    with pytest.raises(InvalidArgument, match="input 1 has the shape \\(5, 4, 3\\)"):
        joined("cat", [a, b], axis=1)
    with pytest.raises(InvalidArgument, match="input 1 is float32"):
        joined("cat", [a, a.astype(np.float32)])
    with pytest.raises(InvalidArgument, match="'axis_name' 'X' is not one letter"):
        joined("cat", [a, a], axis_name="X")
    with pytest.raises(InvalidArgument, match="'axis' is 3, outside \\[-3, 2\\]"):
        joined("cat", [a, a], axis=3)
    with pytest.raises(InvalidArgument, match="layouts \\['CHW', 'HWC'\\]"):
        joined("cat", [a, a], layouts=("HWC", "CHW"))


@pytest.mark.parametrize(("args", "axis", "layout"), [
    ({}, 0, ""), ({"axis": 1}, 1, ""), ({"axis": 1, "axis_name": "F"}, 1, "HFWC"),
    ({"axis": 3, "axis_name": "F"}, 3, "HWCF"), ({"axis": -1}, 3, ""), ({"axis": -4}, 0, ""),
])
def test_stack_inserts_a_new_axis(args: dict[str, Any], axis: int, layout: str) -> None:
    a, b = noise(4, 6, seed=1), noise(4, 6, seed=2)
    out, got = joined("stack", [a, b, a], **args)
    assert np.array_equal(out, np.stack([a, b, a], axis=axis)) and got == layout


def test_stack_refuses_other_shapes_and_axes() -> None:
    a = noise(4, 6, seed=1)
    with pytest.raises(InvalidArgument, match="input 1 has the shape"):
        joined("stack", [a, a[:3]])
    with pytest.raises(InvalidArgument, match="'axis' is 4, outside \\[-4, 3\\]"):
        joined("stack", [a, a], axis=4)
