"""Images decoded into the batch's own buffer (``engine/ops/decode/image_memory.py``) by the
batched decoder on nvImageCodec's CPU backend: which images are placed there, where, and
that their bytes are nvImageCodec's own decode into memory it allocates, whole and as
windows; an image no backend decodes into the buffer is decoded again. On a GPU, the same
against the hardware decoder: tests/engine/test_gpu.py."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from conveyor_server.engine.admission.limits import NO_LIMITS
from conveyor_server.engine.ops.decode.nvimgcodec_batch import CPU_TARGET, BatchDecoder
from conveyor_server.engine.ops.geometry.random_window import Window
from tests.support.mixed_jpegs import batch_of_mixed_sizes

nvimgcodec = pytest.importorskip("nvidia.nvimgcodec")


def cpu_decoder(output_type: str = "RGB") -> BatchDecoder:
    return BatchDecoder("decoders.image", "mixed", output_type, CPU_TARGET, NO_LIMITS)


def fresh_decode(files: list[np.ndarray], output_type: str,
                 regions: Sequence[tuple[int, int, int, int] | None] | None = None
                 ) -> list[Any]:
    """nvImageCodec's own decode of ``files`` into memory it allocates (the CPU backend, with
    the batch decoder's parameters), a region of each where given: HWC uint8 arrays."""
    decoder = nvimgcodec.Decoder(device_id=nvimgcodec.NVIMGCODEC_DEVICE_CPU_ONLY,
                                 backends=[nvimgcodec.Backend(nvimgcodec.BackendKind.CPU_ONLY)])
    color = nvimgcodec.ColorSpec.GRAY if output_type == "GRAY" else nvimgcodec.ColorSpec.SRGB
    params = nvimgcodec.DecodeParams(color_spec=color, allow_any_depth=False,
                                     apply_exif_orientation=True)
    streams = []
    for k, data in enumerate(files):
        stream = nvimgcodec.CodeStream(data.tobytes())
        region = None if regions is None else regions[k]
        if region is not None:
            stream = stream.get_sub_code_stream(region=nvimgcodec.Region(*region))
        streams.append(stream)
    out = []
    for image in decoder.decode(streams, params=params):
        array = np.asarray(image.cpu())
        array = array[:, :, None] if array.ndim == 2 else array
        out.append(array[:, :, ::-1] if output_type == "BGR" else array)
    return out


@pytest.mark.parametrize("output_type", ["RGB", "GRAY", "BGR"])
def test_images_decoded_into_the_batchs_buffer_are_nvimgcodecs_own_decode(
        output_type: str) -> None:
    """Each upright JPEG is decoded into a view of one buffer for the batch (each view at
    an aligned start); a rotated one or a PNG, whose decoded size the code stream does not
    say, into memory nvImageCodec allocates. Either way the bytes are those of nvImageCodec
    decoding into memory of its own."""
    names, files = batch_of_mixed_sizes()
    decoder = cpu_decoder(output_type)
    heads, streams, windows, _keep = decoder.code_streams(files)
    places = decoder.places(heads, streams, windows)
    placed = [view is not None for view in places.arrays]
    assert placed == [not (n.startswith("png") or n.startswith("exif")) for n in names]
    views = [view for view in places.arrays if view is not None]
    (buffer,) = {id(view.base): view.base for view in views}.values()  # one for the batch
    base = buffer.__array_interface__["data"][0]
    offsets = [view.__array_interface__["data"][0] - base for view in views]
    assert all(offset % 256 == 0 for offset in offsets)
    ends = [offset + view.nbytes for offset, view in zip(offsets, views, strict=True)]
    assert all(end <= start for end, start in zip(ends, offsets[1:], strict=False))
    assert ends[-1] <= buffer.nbytes
    fresh = fresh_decode(files, output_type)
    assert [view.shape for view in views] == [e.shape for e, p in zip(fresh, placed,
                                                                     strict=True) if p]
    images = decoder.decode(files)
    for name, image, expected in zip(names, images, fresh, strict=True):
        assert image.shape == expected.shape, name
        np.testing.assert_array_equal(image, expected, err_msg=name)


def test_windows_decoded_into_the_batchs_buffer_are_nvimgcodecs_own_region_decode() -> None:
    names, files = batch_of_mixed_sizes()
    upright = [i for i, n in enumerate(names) if not n.startswith(("png", "exif"))]
    files = [files[i] for i in upright]
    chosen = [(h // 3, w // 4, h - h // 3, w - w // 5)
              for h, w in ((int(s.height), int(s.width))
                           for s in (nvimgcodec.CodeStream(f.tobytes()) for f in files))]

    def window(i: int, height: int, width: int) -> Any:
        y0, x0, y1, x1 = chosen[i]
        return Window(y0, x0, y1 - y0, x1 - x0)

    decoder = cpu_decoder()
    heads, streams, windows, _keep = decoder.code_streams(files, window)
    places = decoder.places(heads, streams, windows)
    assert [view.shape[:2] for view in places.arrays] == \
        [(y1 - y0, x1 - x0) for y0, x0, y1, x1 in chosen]
    for k, (got, expected) in enumerate(zip(decoder.decode(files, window),
                                            fresh_decode(files, "RGB", chosen), strict=True)):
        np.testing.assert_array_equal(got, expected, err_msg=names[upright[k]])


def test_an_image_no_backend_decodes_into_the_buffer_is_decoded_again_on_its_own_memory(
) -> None:
    """On a GPU the CPU decoder, the last backend, writes only to host memory: an image it
    alone decodes comes back None from the decode into the batch's buffer. It is decoded
    again, with the others of its kind, into memory nvImageCodec allocates."""
    names, files = batch_of_mixed_sizes()
    decoder = cpu_decoder()
    real = decoder._decoder
    refused = {3, 9}  # upright JPEGs: placed
    calls: list[list[bool]] = []

    class HostOnly:
        def decode(self, streams: list[Any], images: list[Any] | None = None,
                   **kwargs: Any) -> list[Any]:
            calls.append([image is not None for image in images or [None] * len(streams)])
            out = real.decode(streams, images=images, **kwargs)
            return [None if images is not None and k in refused else image
                    for k, image in enumerate(out)]

    decoder._decoder = HostOnly()
    images = decoder.decode(files)
    assert len(calls) == 2 and calls[1] == [False, False]  # the two again, unplaced
    for name, image, expected in zip(names, images, fresh_decode(files, "RGB"), strict=True):
        np.testing.assert_array_equal(image, expected, err_msg=name)
