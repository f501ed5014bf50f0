"""The host's work before the GPU decoder's decode, per file: the batch's headers read at
once (``batch_headers.py``: the compiled walk) and each file's code stream over its own
array, against the per-file path it replaces (``check_file``, ``exif_orientation``, a copy
of the file, a code stream over the copy).

Files: 256 JPEGs of ~110 kB (about 580x680 at quality 90), made in memory; the server's
default limits.max_image_pixels (100,000,000). Two steps are timed, each over the whole
batch, in thread CPU time, one thread:

- headers: ``check_file`` + ``exif_orientation`` per file, against ``batch_headers``;
- prep: all of ``BatchDecoder.code_streams`` with a window per image (as
  ``decoders.image_random_crop`` on ``device="mixed"``: a region of each upright JPEG),
  against the per-file loop it had before. Needs nvImageCodec (the CPU-only decoder is
  enough: no decode is run).

Run: python -m bench.batch_headers [--runs N]
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import cv2
import numpy as np

import conveyor_server  # noqa: F401 - before cv2, as the engine imports it
from bench._shared import interleaved, machine, make_image, median, parse_args, ratio, spread, table
from conveyor.errors import DeviceUnavailable
from conveyor_server.engine.admission.limits import EngineLimits
from conveyor_server.engine.ops.decode import batch_headers, jpeg_fast
from conveyor_server.engine.ops.decode.decode import check_file
from conveyor_server.engine.ops.decode.nvimgcodec_batch import CPU_TARGET, BatchDecoder
from conveyor_server.engine.ops.geometry.random_window import Window

FILES = 256
SIZE = (580, 680)
LIMITS = EngineLimits(max_image_pixels=100_000_000)
OP = "decoders.image_random_crop"


def jpegs() -> list[np.ndarray]:
    return [cv2.imencode(".jpg", make_image(i, SIZE), [cv2.IMWRITE_JPEG_QUALITY, 90])[1]
            .reshape(-1) for i in range(FILES)]


def window(i: int, h: int, w: int) -> Window:
    return Window(h // 4, w // 4, h // 2, w // 2)


def headers_per_file(files: Sequence[np.ndarray]) -> None:
    for data in files:
        if check_file(data, LIMITS, OP) == "JPEG":
            jpeg_fast.exif_orientation(data)


def headers_batched(files: Sequence[np.ndarray]) -> None:
    heads = batch_headers.batch_headers(files, LIMITS, OP)
    heads.check_all()
    heads.upright_jpegs().tolist()


def prep_per_file(nv: Any, files: Sequence[np.ndarray]) -> list[Any]:
    """``BatchDecoder.decode``'s loop before the batched headers, to the streams."""
    streams: list[Any] = []
    keep: list[Any] = []
    for i, data in enumerate(files):
        fmt = check_file(data, LIMITS, OP)
        encoded = data.tobytes()
        stream = nv.CodeStream(encoded)
        keep += (encoded, stream)
        if fmt == "JPEG" and jpeg_fast.exif_orientation(data) == 1:
            win = window(i, int(stream.height), int(stream.width))
            stream = stream.get_sub_code_stream(
                region=nv.Region(win.y, win.x, win.y + win.h, win.x + win.w))
        streams.append(stream)
    return streams


def per_file_us(step: Callable[[], object], repeats: int = 5) -> Callable[[], float]:
    def run() -> float:
        start = time.thread_time()
        for _ in range(repeats):
            step()
        return (time.thread_time() - start) / (repeats * FILES) * 1e6
    return run


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    files = jpegs()
    mean_kb = sum(f.size for f in files) / len(files) / 1e3
    contenders = {
        "headers, per file": per_file_us(lambda: headers_per_file(files)),
        f"headers, batched ({batch_headers.WALK})": per_file_us(lambda: headers_batched(files)),
    }
    decoder = None
    try:
        decoder = BatchDecoder(OP, "mixed", "RGB", CPU_TARGET, LIMITS)
    except DeviceUnavailable as exc:
        print(f"(no prep rows: {exc})")
    if decoder is not None:
        nv = decoder._nv
        assert len(prep_per_file(nv, files)) == len(decoder.code_streams(files, window)[1])
        contenders["prep, per file"] = per_file_us(lambda: prep_per_file(nv, files))
        contenders["prep, batched"] = per_file_us(lambda: decoder.code_streams(files, window))
    print(f"# host work before the decode ({machine()})\n# {FILES} JPEGs of {mean_kb:.0f} kB "
          f"mean ({SIZE[0]}x{SIZE[1]}), limits.max_image_pixels 100,000,000; median of "
          f"{args.runs} interleaved runs (min-max), thread CPU\n")
    results = interleaved(contenders, args.runs)
    table([(name, f"{median(us):.2f}", spread(us, "{:.2f}")) for name, us in results.items()],
          ("contender", "CPU us per file", "spread"))
    names = list(results)
    rows = [("headers: batched / per file", ratio(results[names[1]], results[names[0]]))]
    if decoder is not None:
        rows.append(("prep: batched / per file",
                     ratio(results["prep, batched"], results["prep, per file"])))
    print()
    table(rows, ("ratio (median of per-run ratios, spread)", "CPU per file"))


if __name__ == "__main__":
    main()
