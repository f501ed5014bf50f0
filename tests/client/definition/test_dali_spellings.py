"""DALI spellings a ported script uses, taken as DALI takes them: a ``bool`` for an ``int``
argument, one number for ``resize``'s ``size``, ``types.INTERP_TRIANGULAR``, the
decoders' buffer hints, ``exec_dynamic``, and ``DataNode.gpu()`` with operators following
their inputs' device."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor import fn, pipeline_def, types
from conveyor.errors import InvalidArgument, SpecError
from tests.support.images import make_image_folder


def decoded() -> Any:
    """Images to record operators on (the specs here are not run)."""
    jpegs, _ = fn.readers.file(file_root="/data")
    return fn.decoders.image(jpegs)


def test_a_bool_is_0_or_1_for_an_int_argument_and_other_types_are_still_refused() -> None:
    @pipeline_def(batch_size=2, seed=1)
    def mirrored(mirror: Any) -> Any:
        return fn.crop_mirror_normalize(decoded(), mirror=mirror)

    assert mirrored(False).spec.ops[2].args["mirror"].i == 0
    assert mirrored(True).spec.ops[2].args["mirror"].i == 1
    assert mirrored(np.bool_(True)).spec.ops[2].args["mirror"].i == 1
    for wrong in (0.0, "0", [0]):
        with pytest.raises(SpecError, match=r"crop_mirror_normalize: argument 'mirror': got"):
            mirrored(wrong)


def test_a_bool_list_is_0s_and_1s_for_an_ints_argument() -> None:
    @pipeline_def(batch_size=2, seed=1)
    def drawn() -> Any:
        return fn.random.uniform(shape=[True, 2])

    assert list(drawn().spec.ops[0].args["shape"].ints.values) == [1, 2]


def test_resize_to_one_number_is_both_extents_as_dali(tmp_path: Path) -> None:
    root = str(make_image_folder(tmp_path / "imgs", counts=(3,), size=(60, 90)))

    @pipeline_def(batch_size=3, seed=1)
    def resized() -> Any:
        jpegs, _ = fn.readers.file(file_root=root)
        images = fn.decoders.image(jpegs)
        return (fn.resize(images, size=40, mode="not_smaller",
                          interp_type=types.INTERP_TRIANGULAR),
                fn.resize(images, resize_shorter=40),
                fn.resize(images, size=40), fn.resize(images, size=(40, 40)))

    pipe = resized()
    assert types.INTERP_TRIANGULAR is types.INTERP_LINEAR
    not_smaller, shorter, square, pair = (list(map(np.asarray, out)) for out in pipe.run())
    assert [min(s.shape[:2]) for s in not_smaller] == [40] * 3
    assert any(max(s.shape[:2]) > 40 for s in not_smaller)
    assert all(np.array_equal(a, b) for a, b in zip(not_smaller, shorter, strict=True))
    assert [s.shape for s in square] == [(40, 40, 3)] * 3
    assert all(np.array_equal(a, b) for a, b in zip(square, pair, strict=True))


def test_the_decoders_buffer_hints_are_checked_and_exec_dynamic_is_accepted() -> None:
    @pipeline_def(batch_size=2, seed=1, exec_dynamic=True)
    def hinted(width: int) -> Any:
        jpegs, _ = fn.readers.file(file_root="/data")
        return fn.decoders.image(jpegs, preallocate_width_hint=width,
                                 preallocate_height_hint=0)

    assert hinted(5980).spec.ops[1].args["preallocate_width_hint"].i == 5980
    with pytest.raises(SpecError, match="'preallocate_width_hint': got -1"):
        hinted(-1)


def test_gpu_is_a_transfer_and_the_operators_it_feeds_run_on_the_gpu() -> None:
    @pipeline_def(batch_size=2, seed=1, device_id=0)
    def moved() -> Any:
        images = decoded()
        on_gpu = images.gpu()
        assert on_gpu.device == "gpu" and images.device == "cpu" and on_gpu.gpu() is on_gpu
        return fn.crop_mirror_normalize(on_gpu), fn.flip(images), fn.flip(on_gpu, device="gpu")

    ops = moved().spec.ops
    assert [(op.type, op.device) for op in ops] == [
        ("readers.file", "cpu"), ("decoders.image", "cpu"), ("copy", "gpu"),
        ("crop_mirror_normalize", "gpu"),
        ("flip", "cpu"), ("flip", "gpu")]


def test_gpu_needs_the_pipelines_device_and_a_gpu_input_a_gpu_operator() -> None:
    @pipeline_def(batch_size=2, seed=1)
    def no_device() -> Any:
        return decoded().gpu()

    with pytest.raises(InvalidArgument, match=r"data.gpu\(\) moves data to the pipeline's "
                       r"GPU, and this pipeline has none \(device_id=None\): give the pipeline "
                       "a device_id"):
        no_device()

    @pipeline_def(batch_size=2, seed=1, device_id=0)
    def cpu_only_after() -> Any:
        return fn.transpose(decoded().gpu(), perm=[2, 0, 1])

    with pytest.raises(SpecError, match=r"transpose: argument 'device': its input is on the "
                       r"GPU \(after .gpu\(\) or a 'mixed' decoder\), and it runs on the CPU "
                       "only: call it before the transfer"):
        cpu_only_after()
