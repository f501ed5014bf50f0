"""decoders.image_slice: the bytes of decoding whole and slicing, for normalized and
absolute anchors and shapes, both axis orders, one axis, every out-of-bounds policy; and
errors naming what is wrong."""

from __future__ import annotations

import math
from typing import Any

import cv2
import numpy as np
import pytest

from conveyor.errors import InvalidArgument, ResourceExhausted, SpecError
from conveyor_server.engine import catalog
from conveyor_server.engine.admission.limits import EngineLimits
from conveyor_server.engine.ops.decode.decode import decode_image
from conveyor_server.engine.ops.registry import OpContext, SampleOp, builder_for
from tests.support.op_helpers import gradient, noise, op_context, pil_bytes

catalog.load()  # every operator registered, as the plan has them, whichever test runs first

H, W = 75, 101


def _jpeg() -> np.ndarray:
    return pil_bytes(cv2.add(gradient(H, W), noise(H, W, seed=9) // 3), "JPEG", quality=90)


def _slice(data: np.ndarray, anchor: list[float], shape: list[float],
           **args: Any) -> np.ndarray:
    op = builder_for("decoders.image_slice")(op_context("decoders.image_slice", **args))
    assert isinstance(op, SampleOp)
    (out,) = op.fn([data, np.array(anchor, np.float32), np.array(shape, np.float32)], {})
    assert out.flags.c_contiguous and out.flags.writeable
    return out


def _round(v: float) -> int:
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


@pytest.mark.parametrize("output_type", ["RGB", "BGR", "GRAY"])
def test_normalized_wh_slice_is_decode_then_slice(output_type: str) -> None:
    data = _jpeg()
    whole = decode_image(data, output_type)
    for ax, ay, sw, sh in ((0.0, 0.0, 1.0, 1.0), (0.25, 0.1, 0.5, 0.6), (0.33, 0.71, 0.41, 0.2)):
        out = _slice(data, [ax, ay], [sw, sh], output_type=output_type)
        # The inputs are float32; positions are computed from them in double precision.
        fx, fy = float(np.float32(ax)) * W, float(np.float32(ay)) * H
        x0, y0 = _round(fx), _round(fy)
        x1, y1 = _round(fx + float(np.float32(sw)) * W), _round(fy + float(np.float32(sh)) * H)
        np.testing.assert_array_equal(out, whole[y0:y1, x0:x1])


def test_absolute_hw_slice_and_one_axis() -> None:
    data = _jpeg()
    whole = decode_image(data, "RGB")
    out = _slice(data, [10.0, 20.0], [30.0, 15.0], normalized_anchor=False,
                 normalized_shape=False, axis_names="HW")
    np.testing.assert_array_equal(out, whole[10:40, 20:35])
    out = _slice(data, [12.0], [0.5], normalized_anchor=False, axes=[0])  # rows only
    np.testing.assert_array_equal(out, whole[12:12 + _round(12.0 + 0.5 * H) - 12, :])
    out = _slice(data, [0.5], [0.25], axis_names="W")
    np.testing.assert_array_equal(out, whole[:, _round(0.5 * W):_round(0.75 * W)])


def test_out_of_bounds_policies() -> None:
    data = _jpeg()
    whole = decode_image(data, "RGB")
    args = {"normalized_anchor": False, "normalized_shape": False, "axis_names": "HW"}
    with pytest.raises(InvalidArgument, match=r"the 20x30 slice at \(y=-5, x=80\) does not "
                                              r"fit in the 75x101 image"):
        _slice(data, [-5.0, 80.0], [20.0, 30.0], **args)
    trimmed = _slice(data, [-5.0, 80.0], [20.0, 30.0], out_of_bounds_policy="trim_to_shape",
                     **args)
    np.testing.assert_array_equal(trimmed, whole[0:15, 80:101])
    padded = _slice(data, [-5.0, 80.0], [20.0, 30.0], out_of_bounds_policy="pad",
                    fill_values=[1.0, 2.0, 3.0], **args)
    assert padded.shape == (20, 30, 3)
    np.testing.assert_array_equal(padded[5:, :21], whole[0:15, 80:101])
    assert (padded[:5] == [1, 2, 3]).all() and (padded[:, 21:] == [1, 2, 3]).all()
    with pytest.raises(InvalidArgument, match=r"outside the 75x101 image"):
        _slice(data, [200.0, 0.0], [5.0, 5.0], out_of_bounds_policy="trim_to_shape", **args)


def test_padding_is_bounded_before_it_is_allocated() -> None:
    ctx = op_context("decoders.image_slice", normalized_shape=False, out_of_bounds_policy="pad")
    ctx = OpContext(**{**ctx.__dict__, "limits": EngineLimits(max_image_pixels=10_000)})
    op = builder_for("decoders.image_slice")(ctx)
    with pytest.raises(ResourceExhausted, match="max_image_pixels"):
        op.fn([_jpeg(), np.zeros(2, np.float32), np.array([5000.0, 5000.0], np.float32)], {})


@pytest.mark.parametrize(("anchor", "shape", "message"), [
    ([0.1], [0.5, 0.5], r"input 'anchor' must hold 2 finite numbers"),
    ([0.1, math.nan], [0.5, 0.5], r"input 'anchor' must hold 2 finite numbers"),
    ([0.1, 0.1], [0.5, -0.5], r"each extent must be at least 1"),
    ([0.1, 0.1], [0.0, 0.5], r"the slice is 0 pixels along axis W"),
])
def test_bad_anchors_and_shapes_are_named(anchor: list[float], shape: list[float],
                                          message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        _slice(_jpeg(), anchor, shape)


def test_argument_errors_name_the_argument() -> None:
    with pytest.raises(SpecError, match=r"argument 'axis_names'"):
        op_context("decoders.image_slice", axis_names="XY")
    with pytest.raises(InvalidArgument, match=r"argument 'axes' names an axis twice"):
        builder_for("decoders.image_slice")(op_context("decoders.image_slice", axes=[1, 1]))
