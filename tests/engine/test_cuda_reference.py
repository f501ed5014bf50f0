"""The GPU operators' definition, checked without a GPU: each kernel's numpy reference,
run on the plan the GPU operator would launch (its parameters computed by the CPU
operators' own code), against the CPU operator on real images of mixed sizes; and a
``device="gpu"`` pipeline refused with a clear message on a machine with no CUDA device."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from conveyor import fn, pipeline_def
from conveyor.errors import DeviceUnavailable, InvalidArgument, SpecError
from conveyor_server import Pipeline
from conveyor_server.engine.device.devices import cuda_device_count
from conveyor_server.engine.ops.cuda import reference
from conveyor_server.engine.ops.registry import SampleFailed, build
from tests.support.cuda_cases import CASES, Case, mixed_batch
from tests.support.images import make_image_folder


def _cpu_outputs(case: Case, images: list[np.ndarray], targs: list[Any]) -> list[np.ndarray]:
    op = build(case.context(), "sample")
    outs = []
    for image, t in zip(images, targs, strict=True):
        outs.append(op.fn([image], t)[0])
    return outs


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.label)
def test_reference_matches_the_cpu_operator(case: Case) -> None:
    images = mixed_batch(seed=len(case.label))
    if case.op_type == "cast" and case.args["dtype"] == "int8":
        images = [im.astype(np.float32) * 1.7 - 150.5 for im in images]
    targs = case.targs(len(images))
    plan = case.plan(images, targs)
    got = reference.run(plan, images)
    expected = _cpu_outputs(case, images, targs)
    assert plan.out_shapes == [e.shape for e in expected]
    worst = 0.0
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        if case.tolerance == 0:
            assert g.tobytes() == e.tobytes(), case.label
        else:
            worst = max(worst, float(np.abs(g.astype(np.float64) - e.astype(np.float64)).max()))
    assert worst <= case.tolerance, f"{case.label}: differs by {worst}"
    if case.tolerance > 0:  # close, not merely within bounds: few values differ at all
        same = np.mean([np.mean(g == e) for g, e in zip(got, expected, strict=True)])
        assert same >= case.min_equal, f"{case.label}: only {same:.3f} of the values are equal"


def test_an_empty_batch_plans_no_work() -> None:
    case = next(c for c in CASES if c.op_type == "rotate")
    assert reference.run(case.plan([], []), []) == []


def test_gpu_only_limits_are_named() -> None:
    with pytest.raises(SpecError, match="interp_type"):
        Case("rotate", {"interp_type": "cubic"}, {"angle": (1.0,)}).plan([], [])
    with pytest.raises(SpecError, match="interp_type"):
        Case("resize", {"size": (4, 4), "interp_type": "lanczos3"}).plan([], [])
    case = Case("rotate", {}, {"angle": (1.0,)})
    with pytest.raises(InvalidArgument, match="float64"):
        case.plan([np.zeros((4, 4, 3))], case.targs(1))


def test_a_bad_sample_is_named_by_its_index() -> None:
    case = Case("crop", {"crop": (10, 10)})
    images = [np.zeros((20, 20, 3), np.uint8), np.zeros((5, 30, 3), np.uint8)]
    with pytest.raises(SampleFailed) as failed:
        case.plan(images, case.targs(2))
    assert failed.value.index == 1
    assert "does not fit" in str(failed.value.error)


@pipeline_def(batch_size=2, seed=5)
def _gpu_pipeline(root: str) -> Any:
    jpegs, _ = fn.readers.file(file_root=root)
    images = fn.decoders.image(jpegs)
    return fn.rotate(images, angle=10.0, device="gpu")


@pytest.mark.skipif(cuda_device_count() > 0, reason="this machine has a CUDA device")
def test_device_gpu_is_refused_without_a_cuda_device(tmp_path: Any) -> None:
    root = make_image_folder(tmp_path / "imgs", counts=(2,))
    with pytest.raises(DeviceUnavailable, match=r"rotate: device='gpu' needs a CUDA device"):
        Pipeline(_gpu_pipeline(str(root)))


@pipeline_def(batch_size=2, seed=5)
def _cubic_on_gpu(root: str) -> Any:
    jpegs, _ = fn.readers.file(file_root=root)
    return fn.rotate(fn.decoders.image(jpegs), angle=10.0, interp_type="cubic", device="gpu")


def test_a_spec_the_gpu_form_refuses_is_named_on_any_machine(tmp_path: Any) -> None:
    # The spec's errors come before the device check: a machine without a GPU reports them.
    root = make_image_folder(tmp_path / "imgs", counts=(2,))
    with pytest.raises(SpecError, match="interp_type.*'nn' or 'linear'"):
        Pipeline(_cubic_on_gpu(str(root)))


def test_gpu_is_a_device_of_the_gpu_operators_only() -> None:
    @pipeline_def(batch_size=1)
    def on_gpu() -> Any:
        jpegs, _ = fn.readers.file(file_root="x", device="gpu")
        return jpegs

    with pytest.raises(SpecError, match="device"):
        on_gpu()

    @pipeline_def(batch_size=1)
    def allowed() -> Any:
        jpegs, _ = fn.readers.file(file_root="x")
        images = fn.decoders.image(jpegs)
        return fn.crop_mirror_normalize(fn.resize(images, size=(8, 8), device="gpu"),
                                        device="gpu")

    assert [op.device for op in allowed().spec.ops][-2:] == ["gpu", "gpu"]
