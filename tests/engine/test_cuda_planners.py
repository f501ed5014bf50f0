"""The batched GPU planners of resize, random_resized_crop and crop_mirror_normalize
against the per-sample planners they replace (``tests/support/reference_planners.py``):
the same arrays (values, types, shapes, and the same packed bytes) on many random batches
of mixed sizes and every argument that changes a plan, and the same error naming the same
sample where a sample is refused. The planners read only shapes and types, so the images
here are numpy arrays of any content (broadcast zeros: no memory)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from conveyor.errors import ConveyorError
from conveyor_server.engine import catalog
from conveyor_server.engine.admission.limits import EngineLimits
from conveyor_server.engine.ops.args import Targs
from conveyor_server.engine.ops.cuda import plans
from conveyor_server.engine.ops.cuda.ops import PLANNERS
from conveyor_server.engine.ops.cuda.resize_batch import ResizeBatcher
from conveyor_server.engine.ops.registry import SAMPLE_INDEX, OpContext, SampleFailed
from tests.support.op_helpers import op_context
from tests.support.reference_planners import REFERENCE


def image(h: int, w: int, c: int = 3, dtype: Any = np.uint8) -> np.ndarray:
    """An HWC array of this shape and type: all a planner reads."""
    return np.broadcast_to(np.zeros((1, 1, c), dtype=dtype), (h, w, c))


def sizes(rng: np.random.Generator, count: int, most: int = 700) -> list[tuple[int, int]]:
    """Mixed sizes: tiny, 1xN and Nx1, photos; a few repeated (the caches' hits)."""
    out = []
    for _ in range(count):
        kind = int(rng.integers(0, 5))
        if kind == 0:
            out.append((int(rng.integers(1, 6)), int(rng.integers(1, 6))))
        elif kind == 1:
            out.append((1, int(rng.integers(1, most))) if rng.integers(2) else
                       (int(rng.integers(1, most)), 1))
        elif kind == 2 and out:
            out.append(out[int(rng.integers(len(out)))])
        else:
            out.append((int(rng.integers(8, most)), int(rng.integers(8, most))))
    return out


def context(op_type: str, fed: tuple[str, ...] = (), seed: int = 0,
            limits: EngineLimits | None = None, **args: Any) -> OpContext:
    catalog.load()
    ctx = op_context(op_type, tensor_args=fed, **args)
    ctx = replace(ctx, seed=seed)
    return ctx if limits is None else replace(ctx, limits=limits)


def both(ctx: OpContext, images: list[np.ndarray], targs: list[Targs]) -> tuple[Any, Any]:
    """(the batched planner's plan, the reference's) for the same batch."""
    new = PLANNERS[ctx.op_type].make(ctx)(images, targs)
    old = REFERENCE[ctx.op_type](ctx)(images, targs)
    return new, old


def assert_same_plan(new: Any, old: Any) -> None:
    assert type(new) is type(old)
    assert len(new.packed.arrays) == len(old.packed.arrays)
    for a, b in zip(new.packed.arrays, old.packed.arrays, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a, b)
    assert new.packed.offsets == old.packed.offsets
    assert new.packed.buffer.tobytes() == old.packed.buffer.tobytes()
    for name in ("out_shapes", "mid_shapes", "chw", "in_dtype", "dtype"):
        if hasattr(old, name):
            assert getattr(new, name) == getattr(old, name), name
    shapes = [*new.out_shapes, *getattr(new, "mid_shapes", [])]
    assert all(type(v) is int for s in shapes for v in s)  # plain ints, as before


def assert_same_error(ctx: OpContext, images: list[np.ndarray], targs: list[Targs]) -> None:
    with pytest.raises(Exception) as old:
        REFERENCE[ctx.op_type](ctx)(images, targs)
    with pytest.raises(Exception) as new:
        PLANNERS[ctx.op_type].make(ctx)(images, targs)
    assert type(new.value) is type(old.value)
    assert str(new.value) == str(old.value)
    if isinstance(old.value, SampleFailed):
        assert isinstance(new.value, SampleFailed)
        assert new.value.index == old.value.index
        assert type(new.value.error) is type(old.value.error)


# -- resize -------------------------------------------------------------------------------

RESIZE_ARGS: list[dict[str, Any]] = [
    {"size": (224, 224)},
    {"size": (224, 224), "antialias": False},
    {"size": (31, 45), "interp_type": "nn"},
    {"resize_shorter": 256.0},
    {"resize_shorter": 256.0, "max_size": (300.0,)},
    {"resize_longer": 64.0, "interp_type": "nn"},
    {"size": (100, 0)},
    {"size": (0, 90), "mode": "stretch"},
    {"size": (120, 80), "mode": "not_larger", "max_size": (100.0, 90.0)},
    {"size": (40, 300), "mode": "not_smaller"},
    {"size": (50, 50), "dtype": "float32"},
    {"resize_shorter": 33.0, "dtype": "float32", "antialias": False},
    {"size": (17, 900)},  # one axis shrinks, the other grows: two steps, rounded between
    {"size": (900, 17), "dtype": "uint8"},
]


@pytest.mark.parametrize("args, dtype", [
    (args, dtype) for args in RESIZE_ARGS for dtype in ("uint8", "float32", "int16")
    if args.get("dtype") != "uint8" or dtype == "uint8"], ids=str)  # uint8 takes uint8
def test_resize_plans_as_the_per_sample_planner(args: dict[str, Any], dtype: str) -> None:
    ctx = context("resize", **args)
    rng = np.random.default_rng(len(str(args)) + len(dtype))
    for count in (1, 7, 64):
        images = [image(h, w, int(rng.choice([1, 3, 4])), dtype) for h, w in sizes(rng, count)]
        assert_same_plan(*both(ctx, images, [{} for _ in images]))


def test_resize_with_sizes_fed_per_sample() -> None:
    ctx = context("resize", fed=("resize_x", "resize_y"))
    rng = np.random.default_rng(4)
    images = [image(h, w) for h, w in sizes(rng, 50)]
    targs: list[Targs] = [
        {"resize_x": np.array(rng.choice([0.0, 7.0, 300.5, 64.0]), dtype=np.float32),
         "resize_y": np.array(rng.choice([0.0, 20.0, 111.0]), dtype=np.float32)}
        for _ in images]
    zero = np.array(0.0, dtype=np.float32)
    targs[0] = {"resize_x": zero, "resize_y": zero}  # left as it is
    assert_same_plan(*both(ctx, images, targs))


def test_resize_plans_the_same_twice_from_its_caches() -> None:
    ctx = context("resize", resize_shorter=128.0)
    planner = PLANNERS["resize"].make(ctx)
    images = [image(h, w) for h, w in sizes(np.random.default_rng(8), 40)]
    targs: list[Targs] = [{} for _ in images]
    first, again = planner(images, targs), planner(images, targs)
    assert_same_plan(first, again)
    assert_same_plan(again, REFERENCE["resize"](ctx)(images, targs))


def test_an_empty_batch_plans_as_before() -> None:
    cases: tuple[tuple[str, dict[str, Any]], ...] = (
        ("resize", {"size": (8, 8)}),
        ("random_resized_crop", {"size": (8, 8)}),
        ("crop_mirror_normalize", {"crop": (4, 4)}))
    for op_type, args in cases:
        assert_same_plan(*both(context(op_type, **args), [], []))


# -- random_resized_crop ------------------------------------------------------------------

RRC_ARGS: list[dict[str, Any]] = [
    {"size": (224, 224)},
    {"size": (224, 224), "interp_type": "nn"},
    {"size": (24, 20), "antialias": False},
    {"size": (9,), "random_area": (0.5, 0.9), "random_aspect_ratio": (0.5, 2.0)},
    {"size": (16, 16), "random_area": (1.0,), "random_aspect_ratio": (3.0, 4.0),
     "num_attempts": 2},  # never fits: the fallback
    {"size": (300, 40), "random_area": (0.01, 1.0), "random_aspect_ratio": (0.1, 10.0),
     "num_attempts": 1},
    {"size": (64, 64), "random_aspect_ratio": (1.0, 1.0), "num_attempts": 100},
]


@pytest.mark.parametrize("args", RRC_ARGS, ids=str)
@pytest.mark.parametrize("dtype", ["uint8", "float32", "uint16"])
def test_random_resized_crop_plans_as_the_per_sample_planner(args: dict[str, Any],
                                                            dtype: str) -> None:
    rng = np.random.default_rng(len(str(args)) * 3 + len(dtype))
    for seed in (0, 12345):
        ctx = context("random_resized_crop", seed=seed, **args)
        for count in (1, 33, 128):
            images = [image(h, w, int(rng.choice([1, 3])), dtype)
                      for h, w in sizes(rng, count, most=2000)]
            first = int(rng.integers(0, 2**40))
            targs: list[Targs] = [{SAMPLE_INDEX: np.array(first + i, dtype=np.uint64)}
                                  for i in range(count)]
            assert_same_plan(*both(ctx, images, targs))


# -- crop_mirror_normalize ----------------------------------------------------------------

NORM: dict[str, Any] = {"mean": (124.0, 117.0, 104.0), "std": (58.0, 57.0, 57.0)}
CMN_ARGS: list[tuple[dict[str, Any], tuple[str, ...]]] = [
    ({"crop": (24, 24), **NORM}, ("mirror",)),
    ({"crop": (24, 24), **NORM, "dtype": "float16", "output_layout": "HWC"}, ("mirror",)),
    ({"crop": (5, 7), **NORM, "pad_output": True}, ("crop_pos_x", "crop_pos_y")),
    ({"crop": (1, 1), "mean": (128.0,), "std": (64.0,), "dtype": "uint8", "scale": 0.5,
      "shift": 64.0, "mirror": 1}, ("crop_pos_x",)),
    ({"crop": (6, 5), "mean": (100.0,), "std": (0.5,), "dtype": "int8"},
     ("mirror", "crop_pos_y")),
    ({"mean": (3.0,), "std": (0.7,), "pad_output": True, "output_layout": "HWC"}, ()),
    ({**NORM, "crop_pos_x": 1.0, "crop_pos_y": 0.0, "crop_h": 9, "crop_w": 13}, ("mirror",)),
]


def _cmn_batch(rng: np.random.Generator, args: dict[str, Any], fed: tuple[str, ...],
               count: int, dtype: str) -> tuple[list[np.ndarray], list[Targs]]:
    crop = args.get("crop") or (args.get("crop_h", 1), args.get("crop_w", 1))
    channels = [3] if len(args["mean"]) == 3 else [1, 2, 3, 4]
    images = [image(h + crop[0], w + crop[1], int(rng.choice(channels)), dtype)
              for h, w in sizes(rng, count, most=300)]
    targs: list[Targs] = []
    for _ in images:
        t: dict[str, np.ndarray] = {}
        for name in fed:
            if name == "mirror":
                t[name] = np.array(rng.integers(0, 2), dtype=np.int32)
            else:  # the edges, and halves that round away from zero
                t[name] = np.array(rng.choice([0.0, 1.0, 0.5, rng.random()]), dtype=np.float32)
        targs.append(t)
    return images, targs


@pytest.mark.parametrize("args, fed", CMN_ARGS, ids=str)
@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32"])
def test_crop_mirror_normalize_plans_as_the_per_sample_planner(
        args: dict[str, Any], fed: tuple[str, ...], dtype: str) -> None:
    ctx = context("crop_mirror_normalize", fed=fed, **args)
    rng = np.random.default_rng(len(str(args)) + len(dtype))
    for count in (1, 9, 100):
        images, targs = _cmn_batch(rng, args, fed, count, dtype)
        assert_same_plan(*both(ctx, images, targs))


# -- errors -------------------------------------------------------------------------------


def test_a_refused_sample_is_named_as_before() -> None:
    cmn = context("crop_mirror_normalize", fed=("mirror", "crop_pos_x"), crop=(10, 10), **NORM)
    good = {"mirror": np.array(1, np.int32), "crop_pos_x": np.array(0.5, np.float32)}
    cases: list[tuple[OpContext, list[np.ndarray], list[Targs]]] = [
        # The window does not fit sample 2.
        (cmn, [image(20, 20), image(30, 12), image(9, 40)], [good] * 3),
        # Sample 1's mirror is out of range, sample 2 is not an image: sample 1 is named.
        (cmn, [image(20, 20), image(20, 20), np.zeros((4, 4))],
         [good, {**good, "mirror": np.array(2, np.int32)}, good]),
        # Out of range alone: above, below.
        (cmn, [image(20, 20)] * 2, [good, {**good, "mirror": np.array(2, np.int32)}]),
        (cmn, [image(20, 20)] * 2, [good, {**good, "crop_pos_x": np.array(-0.04)}]),
        (cmn, [image(20, 20)] * 2, [{**good, "crop_pos_x": np.zeros(2, np.float32)}] * 2),
        # A position of two values, then one that is not finite.
        (cmn, [image(20, 20)] * 3, [good, {**good, "crop_pos_x": np.zeros(2, np.float32)},
                                     {**good, "crop_pos_x": np.array(np.nan, np.float32)}]),
        (cmn, [image(20, 20), image(20, 20, 0)], [good] * 2),
        # Three means for a one-channel image.
        (cmn, [image(20, 20), image(20, 20, 1)], [good] * 2),
        (context("resize", size=(8, 8)), [image(5, 5), np.zeros((0, 3, 3), np.uint8)], [{}] * 2),
        (context("resize", fed=("resize_x",)), [image(5, 5), image(6, 6)],
         [{"resize_x": np.array(4.0)}, {"resize_x": np.array(-1.0)}]),
        (context("resize", size=(8, 8)), [image(5, 5), image(5, 5, 3, np.float64)], [{}] * 2),
        (context("random_resized_crop", size=(8, 8)), [image(5, 5), image(1, 1, 0)],
         [{SAMPLE_INDEX: np.array(i, np.uint64)} for i in range(2)]),
    ]
    for ctx, images, targs in cases:
        assert_same_error(ctx, images, targs)


def test_limits_refuse_the_same_sample_as_before() -> None:
    limits = EngineLimits(max_extent=100, max_image_pixels=5000)
    images = [image(40, 80), image(90, 90), image(300, 20)]
    for ctx in (context("resize", limits=limits, size=(0, 90)),
                context("resize", limits=limits, resize_longer=95.0),
                context("random_resized_crop", limits=limits, size=(80, 80)),
                context("crop_mirror_normalize", limits=limits, **NORM)):
        targs: list[Targs] = [{SAMPLE_INDEX: np.array(i, np.uint64)} for i in range(3)]
        try:
            assert_same_plan(*both(ctx, images, targs))
        except SampleFailed:
            assert_same_error(ctx, images, targs)
    # Each of these is refused by some limit: the checks are not vacuous.
    with pytest.raises(SampleFailed) as failed:
        PLANNERS["resize"].make(context("resize", limits=limits, size=(0, 90)))(images, [{}] * 3)
    assert failed.value.index == 1 and "max_image_pixels" in str(failed.value.error)


# -- packing ------------------------------------------------------------------------------


def test_packed_arrays_are_views_of_one_aligned_buffer() -> None:
    arrays: tuple[np.ndarray, ...] = (
        np.arange(27, dtype=np.int64).reshape(3, 9), np.arange(5, dtype=np.int32),
        np.linspace(0, 1, 7, dtype=np.float32), np.zeros((0, 12), np.int64),
        np.array([1.5], np.float16))
    packed = plans.pack(*arrays)
    assert packed.buffer.dtype == np.uint8 and packed.buffer.ndim == 1
    for at, a, b in zip(packed.offsets, packed.arrays, arrays, strict=True):
        assert at % plans.ALIGN == 0
        assert a.dtype == b.dtype and np.array_equal(a, b)
        assert np.shares_memory(a, packed.buffer) or a.size == 0
    # The views a launch makes of its device copy: here, of a host copy.
    copy = packed.buffer.copy()
    for view, a in zip(packed.views(copy), arrays, strict=True):
        assert view.dtype == a.dtype and np.array_equal(view, a)
        assert np.shares_memory(view, copy) or a.size == 0


def test_the_limits_grow_with_every_extent() -> None:
    # The planners check a batch's largest extents once (``_outputs_allowed``): right only
    # while a shape within one that passes passes too.
    rng = np.random.default_rng(2)
    limits = EngineLimits(max_extent=300, max_image_pixels=40_000, max_batch_bytes=100_000)
    for _ in range(3000):
        big = rng.integers(1, 400, 3)
        small = (big * rng.random(3)).astype(np.int64) + 1
        try:
            limits.check_output(tuple(big.tolist()), "float32")
        except ConveyorError:
            continue
        limits.check_output(tuple(np.minimum(small, big).tolist()), "float32")


def test_the_kept_filters_are_bounded_and_change_no_value() -> None:
    # Keeping 16 filters, each batch needs more: those it does not use are dropped.
    small = ResizeBatcher("linear", True, keep=16)
    reference = REFERENCE["resize"](context("resize", size=(50, 40)))
    rng = np.random.default_rng(6)
    for _ in range(6):
        images = [image(h, w) for h, w in sizes(rng, 30, most=400)]
        shapes = np.array([im.shape for im in images], dtype=np.int64)
        windows = np.zeros((len(images), 4), dtype=np.int64)
        windows[:, 2:] = shapes[:, :2]
        outs = np.tile(np.array([50, 40], dtype=np.int64), (len(images), 1))
        new = small.plan(shapes, windows, outs, np.dtype(np.uint8), np.dtype(np.uint8))
        assert_same_plan(new, reference(images, [{} for _ in images]))
        assert 16 < len(small.filters) <= 2 * len(images)  # this batch's, no more
