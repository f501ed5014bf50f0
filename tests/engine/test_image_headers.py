"""A batch's headers read at once (engine/ops/decode/batch_headers.py and its compiled walk,
image_headers.c) say what the per-file functions say: ``check_file``'s format and error
(same type, same text; the first refused file in the batch's order is the one raised),
``exif_orientation``, ``check_jpeg_complete`` and ``read_size``, on files of every kind
(tests/support/header_cases.py), files cut at many points, and headers declaring huge
sizes; the compiled walk and the Python one agree. The GPU decoder's batch, on
nvImageCodec's CPU backend, reads files in place and decodes what it decoded from copies.
Files with bytes changed at random, and the walk built with AddressSanitizer:
test_image_headers_fuzz.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from conveyor.errors import ConveyorError, DataFileError, InvalidArgument, ResourceExhausted
from conveyor_server.engine.admission.limits import NO_LIMITS, EngineLimits
from conveyor_server.engine.ops.decode import batch_headers as bh
from conveyor_server.engine.ops.decode import decode
from conveyor_server.engine.ops.registry import SampleFailed
from tests.support.header_cases import (
    LIMITS,
    OP,
    as_array,
    assert_same_as_per_file,
    assert_walks_agree,
    c_compiler,
    corpus,
    cuts,
    from_headers,
    jpeg_kinds,
    needs_walk,
    png_kinds,
)
from tests.support.image_files import REAL, jpeg_bomb


def test_the_walk_is_built_where_a_compiler_is() -> None:
    if c_compiler() is None:
        assert bh.WALK == "Python"
    else:
        assert bh.WALK == "compiled walk", (
            f"the server's C extension (_image_headers) was not built although {c_compiler()} "
            "is here: `pip install -e ./server -v` shows the compiler's error")


@pytest.mark.parametrize("limit", sorted(LIMITS))
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_every_kind_of_file_reads_as_the_per_file_functions_read_it(limit: str,
                                                                    compiled: bool) -> None:
    files = corpus()
    names = list(files)
    assert_same_as_per_file(names, list(files.values()), LIMITS[limit], compiled)


@pytest.mark.parametrize("limit", ["none", "default", "5062"])
def test_files_cut_at_many_points(limit: str) -> None:
    kinds = jpeg_kinds() | png_kinds()
    names, files = [], []
    for kind in ("4:2:0", "progressive", "cmyk", "exif MM 6", "exif thumbnail", "pillow exif",
                 "png rgb", "png 16 bit"):
        for k, cut in enumerate(cuts(kinds[kind])):
            names.append(f"{kind} cut {k}: {cut.size} bytes")
            files.append(cut)
    assert_same_as_per_file(names, files, LIMITS[limit], compiled=True)
    assert_walks_agree(files, LIMITS[limit])


@needs_walk
def test_ordinary_jpegs_and_pngs_are_settled_by_the_compiled_walk() -> None:
    kinds = jpeg_kinds() | png_kinds()
    files = list(kinds.values())
    for limits in (NO_LIMITS, LIMITS["default"]):
        heads = bh.batch_headers(files, limits, OP)
        assert heads.settled.all() and not heads.errors
    # Over the limit, cut short, or another format: read in Python, which raises.
    heads = bh.batch_headers([kinds["4:2:0"], kinds["4:2:0"][:-9].copy(), kinds["png 16 bit"],
                              as_array(REAL["webp-lossy"]())], LIMITS["10125"], OP)
    assert heads.settled.tolist() == [True, False, False, False]
    assert isinstance(heads.errors[1], DataFileError) and "truncated JPEG" in str(heads.errors[1])
    assert isinstance(heads.errors[2], ResourceExhausted) and "16-bit" in str(heads.errors[2])
    assert 3 not in heads.errors


def test_exif_orientation_in_either_byte_order() -> None:
    kinds = jpeg_kinds()
    files = [kinds[f"exif {order} {v}"] for order in ("II", "MM") for v in range(1, 9)]
    heads = bh.batch_headers(files, NO_LIMITS, OP)
    assert heads.orientation.tolist() == list(range(1, 9)) * 2
    assert heads.upright_jpegs().tolist() == ([True] + [False] * 7) * 2
    no_exif = bh.batch_headers([kinds["4:2:0"], png_kinds()["png rgb"]], NO_LIMITS, OP)
    assert no_exif.orientation.tolist() == [1, 1]
    assert no_exif.upright_jpegs().tolist() == [True, False]


def test_arrays_that_are_not_a_files_bytes() -> None:
    jpeg = jpeg_kinds()["4:2:0"]
    strided = np.repeat(jpeg, 2)[::2]  # the same bytes, not contiguous
    files = [jpeg, strided, np.zeros((4, 4), np.uint8), jpeg.view(np.int8), jpeg.astype(np.uint16)]
    for compiled in (True, False):
        heads = bh.batch_headers(files, LIMITS["default"], OP, compiled=compiled)
        assert heads.contiguous.tolist() == [True, False, False, False, False]
        assert from_headers(heads, 1) == from_headers(heads, 0)  # read in Python
        for i in (2, 3, 4):
            with pytest.raises(InvalidArgument) as raised:
                decode.check_file(files[i], LIMITS["default"], OP)
            assert str(heads.errors[i]) == str(raised.value)
        assert sorted(heads.errors) == [2, 3, 4]


def test_the_first_refused_file_in_the_batchs_order_is_raised() -> None:
    kinds = jpeg_kinds()
    good, cut = kinds["4:2:0"], kinds["4:2:0"][:300].copy()
    big = as_array(jpeg_bomb(40000, 40000))
    for compiled in (True, False):
        heads = bh.batch_headers([good, good, big, cut, np.zeros(0, np.uint8)],
                                 LIMITS["default"], OP, compiled=compiled)
        with pytest.raises(SampleFailed) as failed:
            heads.check_all()
        assert failed.value.index == 2 and isinstance(failed.value.error, ResourceExhausted)
        heads.check(1)  # passes
        with pytest.raises(SampleFailed) as failed:
            heads.check(4)
        assert str(failed.value.error) == "cannot decode the image: the file is empty (0 bytes)"


@pytest.mark.parametrize("limit", ["none", "default", "5062"])
def test_one_buffer_with_offsets_reads_as_the_files_do(limit: str) -> None:
    files = [*corpus().values(), *cuts(jpeg_kinds()["exif II 6"])[::7]]
    lengths = np.array([f.size for f in files], dtype=np.int64)
    gaps = np.random.default_rng(5).integers(0, 4, len(files))
    offsets = np.cumsum(np.concatenate([[0], lengths[:-1] + gaps[:-1]])) + gaps[-1]
    buffer = np.zeros(int(offsets[-1] + lengths[-1] + 3), np.uint8)
    for f, at in zip(files, offsets, strict=True):
        buffer[at:at + f.size] = f
    expected = bh.batch_headers(files, LIMITS[limit], OP)
    for compiled in (True, False):
        heads = bh.batch_headers_of_spans(buffer, offsets, lengths, LIMITS[limit], OP,
                                          compiled=compiled)
        assert np.array_equal(np.delete(heads.table, 1, axis=1),
                              np.delete(expected.table, 1, axis=1))
        assert {i: str(e) for i, e in heads.errors.items()} == \
            {i: str(e) for i, e in expected.errors.items()}
    for shift, stretch in ((4, 0), (0, 4), (-offsets[1] - 1, 0), (2**62, 2**62)):
        for compiled in (True, False):
            with pytest.raises(InvalidArgument, match="each span inside the buffer"):
                bh.batch_headers_of_spans(buffer, offsets + shift, lengths + stretch,
                                          NO_LIMITS, OP, compiled=compiled)
    with pytest.raises(InvalidArgument, match="C-contiguous 1-D uint8"):
        bh.batch_headers_of_spans(buffer[::2], offsets, lengths, NO_LIMITS, OP)


@needs_walk
def test_the_compiled_walk_refuses_spans_outside_its_buffer() -> None:
    from conveyor_server.engine.ops.decode._image_headers import walk_files, walk_spans

    buffer = np.zeros(10, np.uint8)
    out = np.zeros((1, len(bh.FIELDS)), np.int64)
    for offset, length in ((8, 3), (-1, 2), (0, -1), (11, 0), (2**62, 2**62)):
        with pytest.raises(ValueError, match="outside the buffer"):
            walk_spans(buffer, np.array([offset], np.int64), np.array([length], np.int64), out,
                       -1)
    with pytest.raises(ValueError, match="int64 fields"):
        walk_files([buffer, buffer], np.ndarray, out, -1)


@needs_walk
def test_a_size_at_the_limit_is_settled_and_one_past_it_is_left_to_python() -> None:
    jpeg, png16 = jpeg_kinds()["4:2:0"], png_kinds()["png 16 bit"]  # 61x83 = 5,063 pixels
    for pixels, settled in ((10126, [True, True]), (10125, [True, False]),
                            (5063, [True, False]), (5062, [False, False])):
        heads = bh.batch_headers([jpeg, png16], EngineLimits(max_image_pixels=pixels), OP)
        assert heads.settled.tolist() == settled, pixels
        assert sorted(heads.errors) == [i for i in (0, 1) if not settled[i]], pixels


# -- the GPU decoder's batch, on nvImageCodec's CPU backend ------------------------------------

try:
    from nvidia import nvimgcodec
except ImportError:
    nvimgcodec = None

needs_nvimgcodec = pytest.mark.skipif(nvimgcodec is None, reason="nvImageCodec not installed")


def cpu_batch_decoder(limits: EngineLimits = NO_LIMITS) -> Any:
    from conveyor_server.engine.ops.decode.nvimgcodec_batch import CPU_TARGET, BatchDecoder

    return BatchDecoder("decoders.image_random_crop", "mixed", "RGB", CPU_TARGET, limits)


def window_of(i: int, h: int, w: int) -> Any:
    from conveyor_server.engine.ops.geometry.random_window import Window

    y, x = (i * 7) % (h // 2), (i * 5) % (w // 2)
    return Window(y, x, h // 2 + i % 3, w // 2 + i % 4)


@needs_nvimgcodec
@pytest.mark.parametrize("windows", [False, True], ids=["whole", "windows"])
def test_the_gpu_decoders_batch_decodes_files_in_place_as_from_copies(windows: bool) -> None:
    """Each file read in place by nvImageCodec (own arrays, views into one buffer) or copied
    (not contiguous): the images are those of each file's bytes decoded alone."""
    kinds = jpeg_kinds() | png_kinds()
    names = ["4:2:0", "4:4:4", "progressive", "grayscale", "restart markers", "exif II 1",
             "exif MM 6", "exif II 8", "pillow exif", "exif thumbnail", "padding after",
             "png rgb", "png 16 bit", "png palette"]
    own = [kinds[n] for n in names]
    buffer = np.concatenate([np.concatenate([f, np.zeros(3, np.uint8)]) for f in own])
    starts = np.cumsum([0] + [f.size + 3 for f in own[:-1]])
    views = [buffer[at:at + f.size] for at, f in zip(starts, own, strict=True)]
    strided = [np.repeat(f, 2)[::2] for f in own]
    decoder = nvimgcodec.Decoder(device_id=nvimgcodec.NVIMGCODEC_DEVICE_CPU_ONLY,
                                 backends=[nvimgcodec.Backend(nvimgcodec.BackendKind.CPU_ONLY)])
    params = nvimgcodec.DecodeParams(color_spec=nvimgcodec.ColorSpec.SRGB, allow_any_depth=False,
                                     apply_exif_orientation=True)
    expected = []
    for i, data in enumerate(own):
        image = np.asarray(decoder.decode(nvimgcodec.CodeStream(data.tobytes()),
                                          params=params).cpu())
        if windows:
            win = window_of(i, image.shape[0], image.shape[1])
            image = image[win.y:win.y + win.h, win.x:win.x + win.w]
        expected.append(image)
    batch = cpu_batch_decoder(LIMITS["default"])
    for layout, files in (("own arrays", own), ("views", views), ("strided", strided)):
        heads = bh.batch_headers(files, LIMITS["default"], OP)
        assert heads.contiguous.all() == (layout != "strided")
        images = batch.decode(files, window_of if windows else None)
        for name, image, want in zip(names, images, expected, strict=True):
            np.testing.assert_array_equal(image, want, err_msg=f"{layout}: {name}")


@needs_nvimgcodec
def test_the_gpu_decoders_batch_raises_the_first_failure_in_the_batchs_order() -> None:
    from conveyor_server.engine.ops.geometry.random_window import Window

    good = jpeg_kinds()["4:2:0"]
    cut, big = good[:-30].copy(), as_array(jpeg_bomb(40000, 40000))
    batch = cpu_batch_decoder(LIMITS["default"])
    for files, index in (([good, cut, big], 1), ([good, big, cut], 1), ([good, good, cut], 2)):
        with pytest.raises(SampleFailed) as failed:
            batch.decode(files)
        assert failed.value.index == index
        with pytest.raises(ConveyorError) as alone:
            decode.check_file(files[index], LIMITS["default"], batch._op)
        assert type(failed.value.error) is type(alone.value)
        assert str(failed.value.error) == str(alone.value)

    def refuse_the_first(i: int, h: int, w: int) -> Window:
        if i == 0:
            raise InvalidArgument("the window does not fit")
        return Window(0, 0, h, w)

    with pytest.raises(SampleFailed) as failed:  # the window of file 0 before file 1's check
        batch.decode([good, cut], refuse_the_first)
    assert failed.value.index == 0 and "does not fit" in str(failed.value.error)

