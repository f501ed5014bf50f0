"""The compiled area resize (engine/ops/geometry/area_kernel.c) gives OpenCV's INTER_AREA
bytes: random sizes and channel counts, windows of larger images, natural photos, sizes
that span many of its row bands, saturated values; it refuses inconsistent arguments
instead of reading past a buffer, and threads share it."""

from __future__ import annotations

import ast
import importlib.util
import os
import shlex
import shutil
import subprocess
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

import cv2
import numpy as np
import pytest

from conveyor_server.engine.ops.decode.decode import decode_image
from conveyor_server.engine.ops.geometry import area_resize
from conveyor_server.engine.ops.geometry.resize_filters import area_filter
from tests.support.op_helpers import gradient, noise


def opencv(image: np.ndarray, out_hw: tuple[int, int]) -> np.ndarray:
    out = cv2.resize(np.ascontiguousarray(image), (out_hw[1], out_hw[0]),
                     interpolation=cv2.INTER_AREA)
    return out.reshape(out_hw[0], out_hw[1], image.shape[2])


def kernel(image: np.ndarray, out_hw: tuple[int, int]) -> np.ndarray:
    """The kernel's bytes, after checking that it (not OpenCV) computes them."""
    assert area_resize._kernel_takes(image, out_hw), (image.shape, image.strides, out_hw)
    return area_resize.area_resize(image, out_hw)


def c_compiler() -> str | None:
    """The C compiler an install of the server builds its extension with, if there is one."""
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shutil.which(shlex.split(cc)[0])


def test_the_kernel_is_built_where_a_compiler_is() -> None:
    # Without the kernel every comparison below would be skipped, and resize would run in
    # OpenCV (the same bytes, slower): where the install had a compiler, it must be there.
    if c_compiler() is None:
        assert area_resize.KERNEL == "OpenCV"
    else:
        assert area_resize.KERNEL == "compiled kernel", (
            f"the server's C extension (_area_kernel) was not built although {c_compiler()} "
            "is here: `pip install -e ./server -v` shows the compiler's error")


needs_kernel = pytest.mark.skipif(area_resize.KERNEL != "compiled kernel",
                                  reason="installed without a C compiler: no kernel to compare")


@needs_kernel
@pytest.mark.parametrize("seed", range(4))
def test_random_sizes_and_windows(seed: int) -> None:
    rng = np.random.default_rng(seed)
    checked = 0
    while checked < 60:
        h, w = (int(n) for n in rng.integers(1, 480, 2))
        out_hw = (int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1)))
        channels = int(rng.choice([1, 3, 4]))
        whole = rng.integers(0, 256, (h + 9, w + 5, channels), dtype=np.uint8)
        # Half are windows of a larger image (rows further apart than they are long).
        image = whole[4:4 + h, 2:2 + w] if checked % 2 else np.ascontiguousarray(whole[:h, :w])
        if not area_resize._kernel_takes(image, out_hw):
            continue  # whole-number scales on both axes: OpenCV's own integer path
        np.testing.assert_array_equal(kernel(image, out_hw), opencv(image, out_hw),
                                      err_msg=f"{image.shape} -> {out_hw}")
        checked += 1


def natural_windows() -> list[np.ndarray]:
    """Windows of decoded photo-like JPEGs (~470x405, quality 90), as the ResNet-50 pipeline
    resizes them."""
    rng = np.random.default_rng(7)
    out = []
    for seed in range(6):
        h, w = 440 + 10 * seed, 480 - 8 * seed
        ok, data = cv2.imencode(".jpg", cv2.add(gradient(h, w), noise(h, w, seed=seed) // 3),
                                [cv2.IMWRITE_JPEG_QUALITY, 90])
        assert ok
        image = decode_image(data.reshape(-1), "RGB")
        for _ in range(4):
            wh, ww = int(rng.integers(h // 3, h + 1)), int(rng.integers(w // 3, w + 1))
            y, x = int(rng.integers(0, h - wh + 1)), int(rng.integers(0, w - ww + 1))
            out.append(image[y:y + wh, x:x + ww])
    return out


@needs_kernel
def test_natural_photo_windows_to_224() -> None:
    for window in natural_windows():
        out_hw = (min(224, window.shape[0]), min(224, window.shape[1]))
        if area_resize._kernel_takes(window, out_hw):
            np.testing.assert_array_equal(kernel(window, out_hw), opencv(window, out_hw))


@needs_kernel
@pytest.mark.parametrize(("in_hw", "out_hw"), [
    ((1500, 1100), (224, 300)),  # many row bands
    ((1500, 1100), (7, 5)),      # each output row needs more source rows than a band holds
    ((4001, 3), (3, 2)),
    ((1, 500), (1, 17)),          # one row
    ((500, 1), (33, 1)),          # one column
    ((301, 299), (2, 3)),         # each output pixel averages ~15,000 input pixels
    ((300, 299), (300, 150)),     # rows unchanged, as the first of two resize steps
    ((257, 640), (100, 640)),     # columns unchanged
])
@pytest.mark.parametrize("channels", [1, 3, 4])
def test_edge_sizes(in_hw: tuple[int, int], out_hw: tuple[int, int], channels: int) -> None:
    rng = np.random.default_rng(sum(in_hw) + channels)
    image = rng.integers(0, 256, (*in_hw, channels), dtype=np.uint8)
    np.testing.assert_array_equal(kernel(image, out_hw), opencv(image, out_hw))


@needs_kernel
@pytest.mark.parametrize("value", [0, 1, 127, 254, 255])
def test_flat_and_saturated_values(value: int) -> None:
    image = np.full((333, 217, 3), value, dtype=np.uint8)
    image[::2, ::3] = 255 - value  # a pattern whose averages land on and near halves
    np.testing.assert_array_equal(kernel(image, (200, 150)), opencv(image, (200, 150)))


@needs_kernel
def test_whole_number_scales_go_to_opencv() -> None:
    image = np.arange(400 * 300 * 3, dtype=np.uint32).astype(np.uint8).reshape(400, 300, 3)
    assert not area_resize._kernel_takes(image, (200, 150))  # 2 x 2: OpenCV's integer path
    assert area_resize._kernel_takes(image, (200, 151))
    np.testing.assert_array_equal(area_resize.area_resize(image, (200, 150)),
                                  opencv(image, (200, 150)))


@needs_kernel
def test_a_resize_past_the_scratch_limit_is_left_to_opencv() -> None:
    # 200 rows of 100,000 pixels to 2 x 90,000: each output row's band is its 100 source rows,
    # ~83 MB of scratch (the transposed band, its horizontal pass, the vertical pass's ring),
    # past the kernel's 64 MB. It declines, leaving dst untouched, and OpenCV computes the
    # bytes.
    from conveyor_server.engine.ops.geometry._area_kernel import area_u8

    image = np.random.default_rng(5).integers(0, 256, (200, 100_000, 1), dtype=np.uint8)
    cols, rows = area_filter(100_000, 90_000), area_filter(200, 2)
    out = np.zeros((2, 90_000, 1), np.uint8)
    assert not area_u8(image.reshape(-1), 200, 100_000, 1, 100_000, out, 2, 90_000, cols.start,
                       cols.weights, cols.taps, rows.start, rows.weights, rows.taps)
    assert not out.any()
    np.testing.assert_array_equal(area_resize.area_resize(image, (2, 90_000)),
                                  opencv(image, (2, 90_000)))


@needs_kernel
def test_threads_share_the_kernel() -> None:
    rng = np.random.default_rng(3)
    images = [rng.integers(0, 256, (int(h), 350, 3), dtype=np.uint8)
              for h in rng.integers(230, 500, 16)]
    alone = [kernel(image, (224, 224)) for image in images]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda im: kernel(im, (224, 224)), images * 4))
    for i, out in enumerate(together):
        np.testing.assert_array_equal(out, alone[i % len(images)])


@needs_kernel
def test_inconsistent_arguments_are_refused() -> None:
    from conveyor_server.engine.ops.geometry._area_kernel import area_u8

    flat = np.zeros(40 * 30 * 3, np.uint8)  # a 40x30x3 image
    out = np.empty((20, 20, 3), np.uint8)
    cols, rows = area_filter(30, 20), area_filter(40, 20)

    def call(src: np.ndarray = flat, stride: int = 90, dst: np.ndarray = out,
             x_start: np.ndarray = cols.start, y_start: np.ndarray = rows.start,
             y_taps: int = rows.taps) -> None:
        area_u8(src, 40, 30, 3, stride, dst, 20, 20, x_start, cols.weights, cols.taps,
                  y_start, rows.weights, y_taps)

    call()  # consistent
    with pytest.raises(ValueError, match="do not hold"):
        call(src=flat[:-1])  # one byte short
    with pytest.raises(ValueError, match="do not hold"):
        call(stride=89)  # rows overlap
    with pytest.raises(ValueError, match="do not hold"):
        call(dst=np.empty((20, 19, 3), np.uint8))
    with pytest.raises(ValueError, match="does not fit"):
        call(y_taps=rows.taps + 1)
    past = cols.start.copy()
    past[-1] = 30
    with pytest.raises(ValueError, match="start 19 is 30"):
        call(x_start=past)
    backwards = rows.start.copy()
    backwards[5] = backwards[4] - 1
    with pytest.raises(ValueError, match="none below the one before"):
        call(y_start=backwards)
    with pytest.raises(TypeError):
        call(dst=np.zeros((20, 20, 3), np.uint8)[::-1])  # not contiguous: no buffer to write


SERVER = Path(__file__).resolve().parents[2] / "server"
KERNEL_SOURCE = SERVER / "conveyor_server" / "engine" / "ops" / "geometry" / "area_kernel.c"


def exact_floats() -> list[str]:
    """The compiler flags server/setup.py builds the kernel with."""
    for node in ast.parse((SERVER / "setup.py").read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "EXACT_FLOATS":
            flags: list[str] = ast.literal_eval(node.value)
            return flags
    raise AssertionError("server/setup.py names no EXACT_FLOATS")


def build_variant(tmp_path: Path, name: str, flags: list[str]) -> ModuleType:
    cc = c_compiler()
    assert cc is not None
    out = tmp_path / name / "_area_kernel.abi3.so"
    out.parent.mkdir()
    subprocess.run([cc, *exact_floats(), *flags, "-DAREA_KERNEL_ONE_BUILD", "-fPIC", "-shared",
                    f"-I{sysconfig.get_paths()['include']}", str(KERNEL_SOURCE), "-o", str(out)],
                   check=True, capture_output=True, timeout=120)
    spec = importlib.util.spec_from_file_location("_area_kernel", out)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_kernel
@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the vector builds are x86-64's")
def test_every_vector_width_computes_the_same_bytes(tmp_path: Path) -> None:
    # The installed module picks its AVX2 or baseline loops when it loads. Built once with
    # the baseline's 128-bit vectors only and once for this machine's widest (AVX-512 where
    # it has it), the same source must give the installed module's bytes: no fused
    # multiply-add, no reassociation, whatever the vector width.
    from conveyor_server.engine.ops.geometry._area_kernel import area_u8

    variants = {"baseline": build_variant(tmp_path, "baseline", []),
                "native": build_variant(tmp_path, "native", ["-march=native"])}
    rng = np.random.default_rng(11)
    for _ in range(120):
        h, w = (int(n) for n in rng.integers(1, 400, 2))
        out_hw = (int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1)))
        channels = int(rng.choice([1, 3, 4]))
        image = rng.integers(0, 256, (h, w, channels), dtype=np.uint8)
        cols, rows = area_filter(w, out_hw[1]), area_filter(h, out_hw[0])
        outs = {}
        for name, run in (("installed", area_u8),
                          *((n, v.area_u8) for n, v in variants.items())):
            out = np.empty((*out_hw, channels), np.uint8)
            assert run(image.reshape(-1), h, w, channels, w * channels, out, *out_hw,
                       cols.start, cols.weights, cols.taps, rows.start, rows.weights, rows.taps)
            outs[name] = out
        for name in variants:
            np.testing.assert_array_equal(outs[name], outs["installed"],
                                          err_msg=f"{name}: {image.shape} -> {out_hw}")
