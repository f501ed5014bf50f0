"""DALI's CPU tests of ``fn.reshape`` (``dali/test/python/operator_2/test_reshape.py`` in
NVIDIA/DALI), ported: a shape and a relative shape given as arguments (with and without a
wildcard), as the operator's second input and as argument inputs; ``src_dims`` with and
without ``rel_shape``; the errors (volume mismatch, ``src_dims`` and ``rel_shape`` of other
lengths, ``src_dims`` out of bounds, a ``rel_shape`` longer than the input's dimensions, a
wildcard over a zero volume); written anew against ``conveyor.dali``.

Changed, with the reason: DALI decodes (and resizes) images from its Caffe LMDB in
DALI_extra; here an external source generates random uint8 HWC images of the same sizes
(224x320 where DALI resizes to it, random sizes elsewhere). The error cases assert
Conveyor's messages (INVALID_ARGUMENT naming the sample and the argument), not DALI's
wording. ``fn.reinterpret`` (``test_reinterpret_default_shape``,
``test_reinterpret_wildcard_shape``) and ``fn.constant`` (the ``rel_shape`` given as a
constant node in ``test_reshape_src_dims_arg``) assert Conveyor's refusal (NotSupported,
naming the operator). One difference: with the shape given by another operator and the
number of dimensions kept (``test_reshape_arg_input``), DALI keeps the input's layout
(``"HWC"``) and Conveyor gives none (it fixes layouts when the pipeline is built, before the
shape is known): those 4 cases assert the empty layout. Not ported: the ``"gpu"`` cases
(GPU only).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from conveyor.dali import fn, types
from conveyor.dali.pipeline import pipeline_def
from conveyor.errors import InvalidArgument, NotSupported

BATCH = 4


def images(fixed: tuple[int, int] | None = None) -> Any:
    """Random uint8 HWC images, as DALI's decoded JPEGs (even sizes, as its resize makes)."""
    def source(iteration: int) -> list[np.ndarray]:
        rng = np.random.default_rng(iteration)
        out = []
        for _ in range(BATCH):
            h, w = fixed or (2 * int(rng.integers(100, 128)), 2 * int(rng.integers(100, 128)))
            out.append(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        return out
    return source


def verify_flatten(imgs: Any, reshaped: Any, src_shape: tuple[int, ...] | None = None) -> None:
    assert imgs.layout() == "HWC"
    assert reshaped.layout() == "ab"
    for i in range(len(imgs)):
        img = np.asarray(imgs.at(i))
        if src_shape is not None:
            assert img.shape == src_shape
        out = np.asarray(reshaped.at(i))
        assert out.shape == (img.shape[0], img.shape[1] * img.shape[2])
        np.testing.assert_array_equal(img.flatten(), out.flatten())


def verify_make_tall(imgs: Any, reshaped: Any) -> None:
    assert imgs.layout() == "HWC"
    assert reshaped.layout() == ""  # DALI: "HWC" (see the module's docstring)
    for i in range(len(imgs)):
        img = np.asarray(imgs.at(i))
        out = np.asarray(reshaped.at(i))
        assert out.shape == (img.shape[0] * 2, img.shape[1] // 2, 3)
        np.testing.assert_array_equal(img.flatten(), out.flatten())


@pytest.mark.parametrize("relative", [False, True])
@pytest.mark.parametrize("use_wildcard", [False, True])
def test_reshape_arg(relative: bool, use_wildcard: bool) -> None:
    h, w = 224, 320

    @pipeline_def(batch_size=BATCH, num_threads=3, device_id=0, seed=7865)
    def pipe() -> Any:
        imgs = fn.external_source(images((h, w)), batch=True, layout="HWC")
        if relative:
            reshaped = fn.reshape(imgs, rel_shape=(-1, 3) if use_wildcard else (1, 3),
                                  layout="ab")
        else:
            reshaped = fn.reshape(imgs, shape=(h, -1 if use_wildcard else w * 3), layout="ab")
        return imgs, reshaped

    p = pipe()
    for _ in range(2):
        imgs, reshaped = p.run()
        verify_flatten(imgs, reshaped, src_shape=(h, w, 3))


def collapse_channels(image: np.ndarray) -> np.ndarray:
    return np.array([image.shape[0], image.shape[1] * image.shape[2]]).astype(np.int32)


def collapse_channels_wildcard(image: np.ndarray) -> np.ndarray:
    return np.array([image.shape[0], -1]).astype(np.int32)


@pytest.mark.parametrize("use_wildcard", [False, True])
def test_reshape_input(use_wildcard: bool) -> None:
    @pipeline_def(batch_size=BATCH, num_threads=3, device_id=0, seed=7865)
    def pipe() -> Any:
        imgs = fn.external_source(images(), batch=True, layout="HWC")
        shapes = fn.python_function(imgs, function=collapse_channels_wildcard if use_wildcard
                                    else collapse_channels)
        return imgs, fn.reshape(imgs, shapes, layout="ab")

    p = pipe()
    for _ in range(2):
        imgs, reshaped = p.run()
        verify_flatten(imgs, reshaped)


def make_tall(relative: bool, wildcard: bool) -> Any:
    def func(image: np.ndarray) -> np.ndarray:
        if relative:
            return np.array([-1 if wildcard else 2, 0.5, 1]).astype(np.float32)
        h, w, c = image.shape
        return np.array([-1 if wildcard else 2 * h, w / 2, c]).astype(np.int32)
    return func


@pytest.mark.parametrize("relative", [False, True])
@pytest.mark.parametrize("use_wildcard", [False, True])
def test_reshape_arg_input(relative: bool, use_wildcard: bool) -> None:
    @pipeline_def(batch_size=BATCH, num_threads=3, device_id=0, seed=7865)
    def pipe() -> Any:
        imgs = fn.external_source(images(), batch=True, layout="HWC")
        shapes = fn.python_function(imgs, function=make_tall(relative, use_wildcard))
        if relative:
            return imgs, fn.reshape(imgs, rel_shape=shapes)
        return imgs, fn.reshape(imgs, shape=shapes)

    p = pipe()
    for _ in range(2):
        verify_make_tall(*p.run())


def test_reinterpret_is_refused_naming_it() -> None:
    with pytest.raises(NotSupported, match="fn.reinterpret is not supported"):
        fn.reinterpret(fn.random.uniform(range=[0, 255], shape=(4, 4)), dtype=types.INT32)


def reshape_pipe(shapes: list[list[int]], src_dims: Any = None, rel_shape: Any = None) -> Any:
    @pipeline_def(batch_size=len(shapes), num_threads=1, device_id=0)
    def pipe() -> Any:
        data = fn.external_source(
            lambda iteration: [np.empty(s, dtype=np.uint8) for s in shapes], batch=True)
        args = {k: v for k, v in (("src_dims", src_dims), ("rel_shape", rel_shape))
                if v is not None}
        return fn.reshape(data, **args)
    return pipe()


@pytest.mark.parametrize(("src_dims", "rel_shape", "shapes", "expected"), [
    ([0, 1], None, [[200, 300, 1], [300, 400, 1]], [(200, 300), (300, 400)]),
    ([1, 2, 0], None, [[10, 20, 30], [30, 20, 10], [2, 1, 3]],
     [(20, 30, 10), (20, 10, 30), (1, 3, 2)]),
    ([1], None, [[1, 2, 1], [1, 3, 1]], [(2,), (3,)]),
    ([2, -1, 1, 0], None, [[10, 20, 30]], [(30, 1, 20, 10)]),
    ([-1, 2], None, [[1, 1, 30], [1, 1, 70]], [(1, 30), (1, 70)]),
    ([2, 0, 1], [0.5, 0.5, -1], [[200, 300, 100]], [(50, 100, 1200)]),
    ([], None, [[1]], [()]),
])
def test_reshape_src_dims_arg(src_dims: list[int], rel_shape: Any, shapes: list[list[int]],
                              expected: list[tuple[int, ...]]) -> None:
    pipe = reshape_pipe(shapes, src_dims, rel_shape)
    for _ in range(3):
        (out,) = pipe.run()
        for i in range(len(shapes)):
            assert np.asarray(out.at(i)).shape == expected[i]


def test_rel_shape_as_a_constant_node_is_refused() -> None:
    with pytest.raises(NotSupported, match="fn.constant is not supported"):
        fn.constant(fdata=[0.5, 0.5, -1], dtype=types.FLOAT)


@pytest.mark.parametrize(("src_dims", "rel_shape", "shapes", "message"), [
    ([2, 0], None, [[20, 10, 20]], r"the output shape \[20, 20\] holds 400 values, the "
                                   r"input \[20, 10, 20\] holds 4000"),
    ([2, 0, 1], [1, -1], [[1, 2, 3]], r"'rel_shape' has 2 entries and 'src_dims' 3"),
    ([0, 1, 3], None, [[1, 2, 3]], r"'src_dims' names dimension 3, but the input has 3"),
])
def test_reshape_src_dims_throw_error(src_dims: list[int], rel_shape: Any,
                                      shapes: list[list[int]], message: str) -> None:
    pipe = reshape_pipe(shapes, src_dims, rel_shape)
    with pytest.raises(InvalidArgument, match=message):
        pipe.run()


@pytest.mark.parametrize("rel_shape", [[1, -1, 1], np.array([1, -1, 1], np.float32)])
def test_invalid_wildcard(rel_shape: Any) -> None:
    pipe = reshape_pipe([[480, 640], [320, 240]], rel_shape=rel_shape)
    with pytest.raises(InvalidArgument, match="'rel_shape' has 3 entries for an input of 2 "
                                              "dimensions"):
        pipe.run()


def test_wildcard_zero_volume() -> None:
    pipe = reshape_pipe([[480, 640], [320, 0]], rel_shape=[-1, 1])
    with pytest.raises(InvalidArgument, match=r"sample 1.*cannot hold 0 values whatever its "
                                              r"negative extent"):
        pipe.run()
