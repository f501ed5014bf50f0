"""The batched decoder of ``device="mixed"`` on nvImageCodec's CPU backend: the same code
path as on a GPU (one ``Decoder.decode(list)`` per batch, region decode for the window
decoders), run here without one. Compared with the CPU decoder (libjpeg-turbo through
simplejpeg and OpenCV): nvImageCodec's CPU backend is libjpeg-turbo too, and gives the same
bytes but for CMYK JPEGs (its CMYK to RGB conversion rounds otherwise: at most 1 apart).
nvJPEG's CUDA and hardware decoders are other IDCTs, so on a GPU the bytes differ from the
CPU's (tests/engine/test_gpu.py): that is why the engine identity names the GPU path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor import fn, pipeline_def, types
from conveyor.errors import DataFileError, DeviceUnavailable, InvalidArgument, SpecError
from conveyor_server import Pipeline
from conveyor_server.engine import catalog
from conveyor_server.engine.admission.limits import NO_LIMITS
from conveyor_server.engine.device.devices import cuda_device_count
from conveyor_server.engine.identity.behaviour.measure import process_behaviour
from conveyor_server.engine.ops import registry
from conveyor_server.engine.ops.decode import decode_mixed
from conveyor_server.engine.ops.decode.decode import decode_image
from conveyor_server.engine.ops.decode.nvimgcodec_batch import (
    CPU_TARGET,
    BatchDecoder,
    backend_plan,
    decoder_options,
    describe_backends,
    gpu_target,
    load_nvimgcodec,
    make_backends,
)
from conveyor_server.engine.ops.registry import BATCH, SAMPLE_INDEX, SampleFailed
from tests.support.images import make_image_folder
from tests.support.mixed_jpegs import batch_of_mixed_sizes, jpeg_kinds
from tests.support.op_helpers import build, op_context, run
from tests.support.resume import assert_resume_exact, assert_same_stream, run_batches

nvimgcodec = pytest.importorskip("nvidia.nvimgcodec")

def cpu_decoder(output_type: str = "RGB", op: str = "decoders.image") -> BatchDecoder:
    return BatchDecoder(op, "mixed", output_type, CPU_TARGET, NO_LIMITS)


@pytest.mark.skipif(cuda_device_count() > 0, reason="this machine has a CUDA device")
def test_without_a_gpu_nvimgcodec_needs_both_the_cpu_device_id_and_the_cpu_backend() -> None:
    data = jpeg_kinds(32, 48)["4:2:0"].tobytes()
    cpu_only = nvimgcodec.Backend(nvimgcodec.BackendKind.CPU_ONLY)
    both = nvimgcodec.Decoder(device_id=nvimgcodec.NVIMGCODEC_DEVICE_CPU_ONLY, backends=[cpu_only])
    image = both.decode([nvimgcodec.CodeStream(data)])[0]
    assert image is not None and image.shape == (32, 48, 3)
    # The CPU-only device id alone: every backend is allowed, and the GPU ones fail.
    device_only = nvimgcodec.Decoder(device_id=nvimgcodec.NVIMGCODEC_DEVICE_CPU_ONLY)
    assert device_only.decode([nvimgcodec.CodeStream(data)]) == [None]
    # The CPU-only backend alone: the decoder wants a CUDA device.
    with pytest.raises(RuntimeError, match="CUDA"):
        nvimgcodec.Decoder(backends=[cpu_only])


@pytest.mark.parametrize("output_type", ["RGB", "BGR", "GRAY"])
def test_a_batch_of_mixed_sizes_decodes_as_the_cpu_decoder_does(output_type: str) -> None:
    names, files = batch_of_mixed_sizes()
    images = cpu_decoder(output_type).decode(files)
    assert len(images) == len(files) == 32
    for name, data, image in zip(names, files, images, strict=True):
        expected = decode_image(data, output_type)
        assert isinstance(image, np.ndarray) and image.flags.c_contiguous, name
        assert image.dtype == np.uint8 and image.shape == expected.shape, name
        diff = np.abs(image.astype(np.int16) - expected.astype(np.int16))
        if name.startswith("cmyk") and output_type != "GRAY":
            assert diff.max() <= 1, name  # CMYK to RGB rounds otherwise
        else:
            assert diff.max() == 0, name


def test_region_decode_equals_decode_then_crop() -> None:
    windows = [(0, 0, 8, 8), (3, 5, 40, 77), (1, 1, 60, 82), (7, 9, 8, 10), (16, 17, 61, 83)]
    for kind, data in jpeg_kinds(61, 83).items():
        if kind in ("png", "cmyk", "exif orientation 6"):  # decoded whole, then cropped
            continue
        decoder = nvimgcodec.Decoder(device_id=nvimgcodec.NVIMGCODEC_DEVICE_CPU_ONLY,
                                     backends=[nvimgcodec.Backend(nvimgcodec.BackendKind.CPU_ONLY)])
        encoded = data.tobytes()
        parents = [nvimgcodec.CodeStream(encoded) for _ in windows]
        regions = [parent.get_sub_code_stream(region=nvimgcodec.Region(*w))
                   for parent, w in zip(parents, windows, strict=True)]
        whole, *parts = decoder.decode([nvimgcodec.CodeStream(encoded), *regions])
        full = np.asarray(whole.cpu())
        for (y0, x0, y1, x1), part in zip(windows, parts, strict=True):
            np.testing.assert_array_equal(np.asarray(part.cpu()), full[y0:y1, x0:x1],
                                          err_msg=f"{kind} {(y0, x0, y1, x1)}")


def _sample_indices(first: int, count: int) -> list[np.ndarray]:
    return [np.array(first + i, dtype=np.uint64) for i in range(count)]


@pytest.mark.parametrize("output_type", ["RGB", "GRAY"])
def test_random_crop_windows_are_the_cpu_operators(output_type: str) -> None:
    """Windows drawn by the CPU path's code, decoded as regions (or, for a rotated JPEG or a
    PNG, decoded whole and cropped): the CPU operator's exact bytes."""
    names, files = batch_of_mixed_sizes()
    keep = [i for i, n in enumerate(names) if not n.startswith("cmyk")]
    names, files = [names[i] for i in keep], [files[i] for i in keep]
    args: dict[str, Any] = {"output_type": output_type, "random_area": [0.1, 0.7]}
    ctx = op_context("decoders.image_random_crop", device="mixed", input_layouts=("",), **args)
    indices = _sample_indices(2**33 + 5, len(files))
    op = decode_mixed.image_random_crop_op(ctx, cpu_decoder(output_type, ctx.op_type))
    (crops,) = op.fn([files], {SAMPLE_INDEX: indices})
    cpu = registry.builder_for(ctx.op_type)(op_context(ctx.op_type, input_layouts=("",), **args))
    assert isinstance(cpu, registry.SampleOp)
    shapes = set()
    for name, data, index, crop in zip(names, files, indices, crops, strict=True):
        (expected,) = cpu.fn([data], {SAMPLE_INDEX: index})
        np.testing.assert_array_equal(crop, expected, err_msg=name)
        shapes.add(crop.shape)
    assert len(shapes) > 10  # windows of many sizes


def test_crop_windows_are_the_cpu_operators_and_refuse_what_does_not_fit() -> None:
    names, files = batch_of_mixed_sizes()
    fits = [i for i, n in enumerate(names) if not n.endswith("8x8") and not n.startswith("cmyk")]
    pos = {"crop_pos_x": [np.float32(0.25 + 0.02 * i) for i in fits],
           "crop_pos_y": [np.float32(0.9 - 0.03 * i) for i in fits]}
    ctx = op_context("decoders.image_crop", device="mixed", input_layouts=("",),
                     tensor_args=pos, crop=[12.0, 15.0], output_type="BGR")
    op = decode_mixed.image_crop_op(ctx, cpu_decoder("BGR", ctx.op_type))
    (crops,) = op.fn([[files[i] for i in fits]], pos)
    cpu = build("decoders.image_crop", input_layouts=("",), tensor_args=pos, crop=[12.0, 15.0],
                output_type="BGR")
    for k, i in enumerate(fits):
        expected = run(cpu, files[i], crop_pos_x=pos["crop_pos_x"][k],
                       crop_pos_y=pos["crop_pos_y"][k])
        assert crops[k].shape == (12, 15, 3)
        np.testing.assert_array_equal(crops[k], expected, err_msg=names[i])
    small = [files[0], jpeg_kinds(8, 8)["4:2:0"]]
    half = [np.float32(0.5)] * 2
    with pytest.raises(SampleFailed) as failed:
        op.fn([small], {"crop_pos_x": half, "crop_pos_y": half})
    assert failed.value.index == 1 and isinstance(failed.value.error, InvalidArgument)
    assert "does not fit in the 8x8 image" in str(failed.value.error)


def test_a_file_that_cannot_be_decoded_is_named_by_its_place_in_the_batch() -> None:
    good = jpeg_kinds(20, 30)["4:4:4"]
    cut = good[: good.size // 2]
    for bad, reason in ((cut, "truncated JPEG"), (np.zeros(0, np.uint8), "empty"),
                        (np.frombuffer(b"not an image at all", np.uint8), "could not decode")):
        with pytest.raises(SampleFailed) as failed:
            cpu_decoder().decode([good, good, bad, good])
        assert failed.value.index == 2
        assert isinstance(failed.value.error, DataFileError)
        assert reason in failed.value.error.message


def test_the_backends_in_order_and_the_hardware_decoders_share() -> None:
    assert backend_plan(gpu_target(0, 0.65)) == [
        ("hw_gpu_only", 0.65), ("gpu_only", 1.0), ("hybrid_cpu_gpu", 1.0), ("cpu_only", 1.0)]
    assert backend_plan(gpu_target(1, 0.0))[0] == ("gpu_only", 1.0)
    assert backend_plan(CPU_TARGET) == [("cpu_only", 1.0)]
    assert describe_backends(gpu_target(0, 0.9)) == \
        "hw_gpu_only 0.9, gpu_only, hybrid_cpu_gpu, cpu_only"


def test_every_backend_keeps_a_fixed_share_whatever_the_timing() -> None:
    """An adaptive load policy would move samples between the hardware and the CUDA
    decoders as their speeds vary, and their bytes differ: every backend is FIXED."""
    nv = load_nvimgcodec("decoders.image", "mixed")
    for target in (gpu_target(0, 0.65), gpu_target(0, 0.0), CPU_TARGET):
        backends = make_backends(nv, target)
        assert [(b.backend_kind, b.load_hint) for b in backends] == [
            (getattr(nv.BackendKind, name.upper()), pytest.approx(hint))
            for name, hint in backend_plan(target)]
        assert all(b.load_hint_policy == nv.LoadHintPolicy.FIXED for b in backends)


def test_the_decoders_allocate_ahead_for_the_pipelines_batch_and_hinted_size() -> None:
    assert decoder_options(gpu_target(0, 0.65, batch_size=256, width_hint=640,
                                      height_hint=480)).split() == [
        "nvjpeg_cuda_decoder:preallocate_buffers=1",
        "nvjpeg_hw_decoder:preallocate_batch_size=256",
        "nvjpeg_hw_decoder:preallocate_width_hint=640",
        "nvjpeg_hw_decoder:preallocate_height_hint=480"]
    assert decoder_options(gpu_target(0, 0.65, batch_size=8)).split() == [
        "nvjpeg_cuda_decoder:preallocate_buffers=1", "nvjpeg_hw_decoder:preallocate_batch_size=8"]
    assert decoder_options(CPU_TARGET) == ""


# -- the batched path in a pipeline, on the CPU backend -----------------------------------


@pipeline_def(batch_size=5, seed=11, enable_checkpointing=True)
def random_crops(root: str, on_error: str = "fail") -> Any:
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
    images = fn.decoders.image_random_crop(jpegs, output_type=types.RGB, on_error=on_error,
                                           random_area=[0.2, 0.9])
    return images, labels


@pytest.fixture
def cpu_backend_random_crop(monkeypatch: pytest.MonkeyPatch) -> None:
    """``decoders.image_random_crop``'s batched form: the mixed decoder's, on the CPU
    backend (the per-sample CPU operator stays the other form)."""
    def build_on_cpu_backend(ctx: registry.OpContext) -> registry.BatchOp:
        return decode_mixed.image_random_crop_op(ctx, cpu_decoder("RGB", ctx.op_type))

    catalog.load()  # the built-in operators first
    # The process's behaviour is measured once and kept: measure it on the real operators,
    # not on this stand-in.
    process_behaviour()
    monkeypatch.setitem(registry._BUILDERS, ("decoders.image_random_crop", BATCH),
                        build_on_cpu_backend)


@pytest.mark.usefixtures("cpu_backend_random_crop")
def test_the_batched_path_in_a_pipeline_streams_the_cpu_bytes_and_resumes_exactly(
        tmp_path: Path) -> None:
    root = str(make_image_folder(tmp_path / "imgs", counts=(4, 5, 3)))
    with Pipeline(random_crops(root)) as batched, \
            Pipeline(random_crops(root), batch_ops=False) as per_sample:
        assert batched._plan.describe() == ["per sample: (read only)",
                                            "per batch: decoders.image_random_crop@cpu"]
        for _ in range(4):  # past an epoch of 12
            (a, la), (b, lb) = batched.run(), per_sample.run()
            assert [int(x[0]) for x in la] == [int(x[0]) for x in lb]
            for x, y in zip(a, b, strict=True):
                np.testing.assert_array_equal(x, y)
    assert_resume_exact(random_crops(root), 2, 3)
    with Pipeline(random_crops(root)) as first:
        expected = run_batches(first, 4)
    for threads, depth in ((1, 1), (4, 3)):
        spec = random_crops(root).spec
        spec.num_threads, spec.prefetch_queue_depth = threads, depth
        with Pipeline(spec) as again:
            assert_same_stream(expected, run_batches(again, 4), f"threads {threads}")


@pytest.mark.usefixtures("cpu_backend_random_crop")
def test_the_batched_path_leaves_out_a_corrupt_file_under_skip(tmp_path: Path) -> None:
    root = make_image_folder(tmp_path / "imgs", counts=(5,))
    victim = sorted(root.rglob("*.jpg"))[2]
    victim.write_bytes(victim.read_bytes()[:200])
    with Pipeline(random_crops(str(root), on_error="skip")) as skip, \
            Pipeline(random_crops(str(root), on_error="skip"), batch_ops=False) as per_sample:
        images, _ = skip.run()
        expected, _ = per_sample.run()
        assert len(images) == len(expected) == 4 and skip.samples_skipped == 1
        for x, y in zip(images, expected, strict=True):
            np.testing.assert_array_equal(x, y)
    with Pipeline(random_crops(str(root))) as fail, \
            pytest.raises(DataFileError, match="decoders.image_random_crop .* truncated JPEG"):
        fail.run()


def byte_count(file: np.ndarray) -> np.ndarray:
    """python_function's: the file's size (a batch step before the decoder)."""
    return np.array([file.size], dtype=np.int64)


@pipeline_def(batch_size=5, seed=11, enable_checkpointing=True)
def chained(root: str, on_error: str = "fail") -> Any:
    """Three batch steps in a row (one chain): python_function, the decoder, and
    crop_mirror_normalize; the first step's column is an output too."""
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
    sizes = fn.python_function(jpegs, function=f"{__name__}:byte_count")
    images = fn.decoders.image_random_crop(jpegs, output_type=types.RGB, on_error=on_error,
                                           random_area=[0.2, 0.9])
    out = fn.crop_mirror_normalize(images, crop=(12, 10), mean=[100.0], std=[50.0],
                                   mirror=fn.random.coin_flip())
    return out, sizes, labels


@pytest.mark.usefixtures("cpu_backend_random_crop")
@pytest.mark.parametrize("on_error", ["skip", "replace"])
def test_a_sample_a_chained_step_leaves_out_leaves_every_column_of_the_chain(
        tmp_path: Path, on_error: str) -> None:
    """The decoder fails on a cut file after python_function made its column in the same
    chain: the sample leaves (or is replaced in) every output alike, as where the steps
    after python_function run per sample."""
    root = make_image_folder(tmp_path / "imgs", counts=(4, 6))
    victim = sorted(root.rglob("*.jpg"))[3]
    victim.write_bytes(victim.read_bytes()[:300])
    with Pipeline(chained(str(root), on_error)) as chain, \
            Pipeline(chained(str(root), on_error), batch_ops=False) as apart:
        assert chain._plan.describe() == [
            "per sample: (read only)", "per batch: python_function@cpu",
            "per batch: decoders.image_random_crop@cpu", "per batch: crop_mirror_normalize@cpu"]
        assert apart._plan.describe() == [
            "per sample: python_function@cpu, decoders.image_random_crop@cpu, "
            "crop_mirror_normalize@cpu"]
        sizes: set[int] = set()
        for _ in range(4):  # two epochs of 10: the cut file is in every one
            got, want = chain.run(), apart.run()
            for a, b in zip(got, want, strict=True):
                assert len(a) == len(b)
                for x, y in zip(a, b, strict=True):
                    np.testing.assert_array_equal(x, y)
            sizes |= {int(s[0]) for s in got[1]}
        left_out = chain.samples_skipped + chain.samples_replaced
        assert left_out == apart.samples_skipped + apart.samples_replaced == 2
        # python_function's column lost the cut file's row too (replaced: the next good
        # sample's values stand in it).
        assert victim.stat().st_size not in sizes and len(sizes) > 5


@pytest.mark.usefixtures("cpu_backend_random_crop")
def test_a_chain_keeps_only_what_is_needed_after_it_and_resumes_exactly(tmp_path: Path) -> None:
    root = str(make_image_folder(tmp_path / "imgs", counts=(4, 5)))
    with Pipeline(chained(root)) as pipe:
        plan = pipe._plan
        pipe.next_ready(10)
        pipe.wait_prefetched()
        for work in pipe._queue._inflight:
            assert {frozenset(s.values) for s in work.results()} == {frozenset(plan.outputs)}
    assert_resume_exact(chained(root), 2, 3)


@pytest.mark.usefixtures("cpu_backend_random_crop")
def test_a_chained_step_failing_under_fail_names_the_file(tmp_path: Path) -> None:
    root = make_image_folder(tmp_path / "imgs", counts=(5,))
    victim = sorted(root.rglob("*.jpg"))[1]
    victim.write_bytes(victim.read_bytes()[:200])
    with Pipeline(chained(str(root))) as fail, \
            pytest.raises(DataFileError, match=rf"decoders.image_random_crop .*{victim.name}"
                                               r".* truncated JPEG"):
        fail.run()


@pytest.mark.skipif(cuda_device_count() > 0, reason="this machine has a CUDA device")
def test_the_window_decoders_on_mixed_are_refused_without_a_gpu(tmp_path: Path) -> None:
    root = str(make_image_folder(tmp_path / "imgs", counts=(2,)))

    @pipeline_def(batch_size=2, seed=1)
    def on_mixed() -> Any:
        jpegs, _ = fn.readers.file(file_root=root)
        return fn.decoders.image_crop(jpegs, device="mixed", crop=(8, 8))

    with pytest.raises(DeviceUnavailable, match=r"decoders.image_crop: device='mixed' needs a "
                                                r"CUDA device, and this machine has none"):
        Pipeline(on_mixed())

    @pipeline_def(batch_size=2, seed=1)
    def on_gpu() -> Any:
        jpegs, _ = fn.readers.file(file_root=root)
        return fn.decoders.image_random_crop(jpegs, device="gpu")

    with pytest.raises(SpecError, match="'device': got 'gpu', expected one of 'cpu', 'mixed'"):
        on_gpu()


def test_a_cpu_operator_fed_by_a_gpu_one_is_refused_naming_both(tmp_path: Path) -> None:
    root = str(make_image_folder(tmp_path / "imgs", counts=(2,)))

    @pipeline_def(batch_size=2, seed=1)
    def back_to_cpu() -> Any:
        jpegs, _ = fn.readers.file(file_root=root)
        images = fn.decoders.image(jpegs, device="mixed")
        return fn.rotate(images, angle=10.0, device="cpu")  # no device: the GPU's, as DALI

    with pytest.raises(SpecError, match=r"rotate: argument 'device': its input 0 comes from "
                                        r"decoders.image \(op 1\) on device='mixed': a CPU "
                                        "operator cannot take GPU data"):
        Pipeline(back_to_cpu())
