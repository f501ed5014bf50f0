"""The GPU decoder (``device="mixed"``) on a CUDA machine; skipped with a reason where there
is none. What runs without a GPU (the same batched path on nvImageCodec's CPU backend, the
ring's bookkeeping, the identity rule) is in engine/test_nvimgcodec_cpu.py,
engine/test_output_ring.py and engine/test_gpu_identity.py."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from conveyor import fn, pipeline_def, types
from conveyor_server import Pipeline
from conveyor_server.engine.admission.limits import NO_LIMITS
from conveyor_server.engine.device.devices import cuda_device_count
from conveyor_server.engine.ops.decode.nvimgcodec_batch import BatchDecoder, gpu_target
from tests.support.images import make_image_folder
from tests.support.op_helpers import gradient, noise, pil_bytes
from tests.support.resume import assert_resume_exact, assert_same_stream, run_batches


def gpu_decoder_missing() -> str:
    """Why nvImageCodec cannot decode on CUDA device 0 here ("" when it can): a GPU host
    without it (or without a build for its CUDA) skips these tests, as a host without a
    GPU does (tests/conftest.py)."""
    if cuda_device_count() == 0:
        return "needs a CUDA device; this machine has none"
    try:
        from nvidia import nvimgcodec
    except ImportError as exc:
        return f"needs nvImageCodec (the server's [gpu] or [gpu-cu13] extra): {exc}"
    try:
        # The decoders that write to the device: the hardware one and nvJPEG's CUDA one,
        # which nvImageCodec 0.9 files under the hybrid kind (GPU_ONLY alone has no JPEG
        # decoder there, and creating a decoder of it fails on an H200 that decodes).
        kinds = nvimgcodec.BackendKind
        nvimgcodec.Decoder(device_id=0, backends=[
            nvimgcodec.Backend(kind)
            for kind in (kinds.HW_GPU_ONLY, kinds.GPU_ONLY, kinds.HYBRID_CPU_GPU)])
    except Exception as exc:  # no nvJPEG, or a build for another CUDA than the driver's
        return f"nvImageCodec cannot decode on CUDA device 0: {type(exc).__name__}: {exc}"
    return ""


_MISSING = gpu_decoder_missing()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(_MISSING), reason=_MISSING)]


@pipeline_def(batch_size=4, seed=3, enable_checkpointing=True)
def decode_on(root: str, device: str) -> Any:
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
    return fn.decoders.image(jpegs, device=device, output_type=types.RGB), labels


@pipeline_def(batch_size=6, seed=5, enable_checkpointing=True, device_id=0)
def random_crops_on_gpu(root: str) -> Any:
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
    images = fn.decoders.image_random_crop(jpegs, device="mixed", output_type=types.RGB)
    return images, labels


def test_mixed_decoder_matches_the_cpu_decoder_and_resumes_exactly(tmp_path: Path) -> None:
    root = str(make_image_folder(tmp_path / "imgs", counts=(4, 4)))
    with Pipeline(decode_on(root, "cpu")) as cpu, Pipeline(decode_on(root, "mixed")) as gpu:
        for _ in range(3):
            (a, la), (b, lb) = cpu.run(), gpu.run()
            assert [int(x[0]) for x in la] == [int(x[0]) for x in lb]
            for x, y in zip(a, b, strict=True):
                assert isinstance(y, np.ndarray)  # out of the GPU through the ring
                assert x.shape == y.shape and x.dtype == y.dtype == np.uint8
                # Different IDCTs: close, not bit-identical.
                assert float(np.abs(x.astype(np.int16) - y.astype(np.int16)).mean()) < 2.0
    assert_resume_exact(decode_on(root, "mixed"), 2, 3)


def test_a_gpu_batch_is_cupy_arrays_hwc_uint8_on_the_device() -> None:
    cupy = pytest.importorskip("cupy")
    files = [pil_bytes(gradient(h, w), "JPEG", quality=90) for h, w in ((40, 60), (33, 71))]
    images = BatchDecoder("decoders.image", "mixed", "RGB", gpu_target(0, 0.65),
                          NO_LIMITS).decode(files)
    for image, (h, w) in zip(images, ((40, 60), (33, 71)), strict=True):
        assert isinstance(image, cupy.ndarray) and image.device.id == 0
        assert image.shape == (h, w, 3) and image.dtype == np.uint8
        assert image.flags.c_contiguous


def test_images_decoded_into_the_batchs_buffer_are_nvimgcodecs_own_decode_on_the_gpu() -> None:
    """The batch decoder places each upright JPEG in one device buffer for the batch; the
    bytes are those nvImageCodec decodes into memory of its own with the same backends and
    options (the hardware decoder takes its share), whole and as windows."""
    cupy = pytest.importorskip("cupy")
    from nvidia import nvimgcodec

    from conveyor_server.engine.ops.decode import decode_mixed
    from conveyor_server.engine.ops.decode.nvimgcodec_batch import decoder_options, make_backends
    from tests.support.mixed_jpegs import batch_of_mixed_sizes

    names, files = batch_of_mixed_sizes()
    files = files * 4  # 128 images: the hardware decoder's share and the others'
    names = names * 4
    target = gpu_target(0, 0.65, batch_size=len(files))
    decoder = BatchDecoder("decoders.image", "mixed", "RGB", target, NO_LIMITS)
    fresh = nvimgcodec.Decoder(device_id=0, backends=make_backends(nvimgcodec, target),
                               options=decoder_options(target))
    params = nvimgcodec.DecodeParams(color_spec=nvimgcodec.ColorSpec.SRGB,
                                     allow_any_depth=False, apply_exif_orientation=True)
    regions = [None if n.startswith(("png", "exif")) else (1, 2, 7, 8) for n in names]

    def window(i: int, height: int, width: int) -> Any:
        return decode_mixed.Window(1, 2, 6, 6)  # a region of an upright JPEG, else a crop

    for windowed in (False, True):
        got = decoder.decode(files, window if windowed else None)
        streams = []
        for data, region in zip(files, regions, strict=True):
            stream = nvimgcodec.CodeStream(data.tobytes())
            if windowed and region is not None:
                stream = stream.get_sub_code_stream(region=nvimgcodec.Region(*region))
            streams.append(stream)
        expected = fresh.decode(streams, params=params)
        # One allocation holds every upright JPEG (but any the CPU decoder alone decodes:
        # decoded again, on memory of its own).
        shared = Counter(id(image.data.mem) for image in got).most_common(1)[0][1]
        assert shared >= sum(r is not None and not n.startswith("cmyk")
                             for n, r in zip(names, regions, strict=True))
        for name, image, want, region in zip(names, got, expected, regions, strict=True):
            array = np.asarray(want.cpu())
            if windowed and region is None:  # decoded whole, then cropped
                array = array[1:7, 2:8]
            array = array[:, :, None] if array.ndim == 2 else array
            np.testing.assert_array_equal(cupy.asnumpy(image), array,
                                          err_msg=f"{name}, windows {windowed}")


def test_the_hardware_decoder_decodes_on_an_a100_or_h100() -> None:
    cupy = pytest.importorskip("cupy")
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    if not any(model in name for model in ("A100", "H100", "H200", "H800", "A800")):
        pytest.skip(f"{name} has no hardware JPEG decoder")
    from nvidia import nvimgcodec

    hardware_only = nvimgcodec.Decoder(
        device_id=0, backends=[nvimgcodec.Backend(nvimgcodec.BackendKind.HW_GPU_ONLY)])
    photo = np.clip(gradient(480, 640).astype(np.int16) + noise(480, 640) // 8 - 16,
                    0, 255).astype(np.uint8)
    data = pil_bytes(photo, "JPEG", quality=90, subsampling=2).tobytes()
    # Only the hardware backend is allowed: an image comes back only if it decoded it.
    images = hardware_only.decode([nvimgcodec.CodeStream(data) for _ in range(16)])
    assert all(image is not None for image in images), f"{name}: hardware decoder not used"
    first = cupy.asnumpy(cupy.asarray(images[0]))
    assert first.shape == (480, 640, 3)
    # Against a CPU decode of the same bytes (the noise and the 4:2:0 chroma are lost by the
    # encoding, not the decoder): another IDCT and upsampling, close but not bit-identical.
    on_cpu = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    assert float(np.abs(first.astype(np.int16) - on_cpu).mean()) < 2.0


def test_the_batched_mixed_decode_is_the_same_on_every_run(tmp_path: Path) -> None:
    root = str(make_image_folder(tmp_path / "imgs", counts=(7, 6, 5)))
    with Pipeline(random_crops_on_gpu(root)) as first:
        expected = run_batches(first, 5)
    for threads, depth in ((1, 1), (4, 3)):
        spec = random_crops_on_gpu(root).spec
        spec.num_threads, spec.prefetch_queue_depth = threads, depth
        with Pipeline(spec) as again:
            assert_same_stream(expected, run_batches(again, 5), f"threads {threads}")


def test_exact_resume_on_the_gpu(tmp_path: Path) -> None:
    root = str(make_image_folder(tmp_path / "imgs", counts=(5, 6)))
    blob = assert_resume_exact(random_crops_on_gpu(root), 3, 3)
    with Pipeline(random_crops_on_gpu(root)) as pipe:
        identity = pipe.engine_id()
        assert identity.gpu and "decode backends op 1: hw_gpu_only 0.65" in identity.gpu
        assert any(op.key == "decoders.image_random_crop@gpu" and op.digest
                   for op in identity.ops)
        assert blob
