"""The area-averaging resize alone: the server's compiled kernel against OpenCV's
``INTER_AREA`` (the same bytes; checked here on every window), on the windows the ResNet-50
pipeline resizes.

Windows: each bench JPEG decoded (RGB), one random window per image by DALI's rule (area
0.08-1, aspect ratio 3/4-4/3, keyed by the image's index), shrunk to 224x224 on the axes
that shrink, as ``resize`` does with ``antialias``; only windows that shrink on some axis
(the kernel's work) are timed. One thread, OpenCV's own threads off, glibc's malloc tuned as
servers and pipelines run it (``conveyor.transport.allocator``); each run times every window
once with each contender, alternating, in thread CPU time.

Target: the kernel costs <= 0.6 x OpenCV's CPU per resize (median of per-run ratios).

Run: python -m bench.area_resize [--quick] [--runs N] [--data DIR]
"""

from __future__ import annotations

import time
from collections.abc import Callable

import cv2
import numpy as np

from bench._shared import (
    image_files,
    interleaved,
    machine,
    make_dataset,
    median,
    parse_args,
    ratio,
    spread,
    table,
)
from conveyor.transport.allocator import DEFAULT, tune_malloc
from conveyor_server.engine.ops.decode.decode import decode_image
from conveyor_server.engine.ops.geometry import area_resize

SIZE = 224


def windows(files: list[str]) -> list[tuple[np.ndarray, tuple[int, int]]]:
    """(window, output size) for each image whose window shrinks on some axis."""
    out = []
    for i, path in enumerate(files):
        image = decode_image(np.fromfile(path, dtype=np.uint8), "RGB")
        rng = np.random.default_rng(i)
        h, w = image.shape[:2]
        wh, ww = h, w
        for _ in range(10):
            area = h * w * rng.uniform(0.08, 1.0)
            aspect = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
            ww, wh = round(np.sqrt(area * aspect)), round(np.sqrt(area / aspect))
            if 0 < ww <= w and 0 < wh <= h:
                break
        else:
            wh, ww = h, w
        y, x = int(rng.integers(0, h - wh + 1)), int(rng.integers(0, w - ww + 1))
        shrunk = (min(SIZE, wh), min(SIZE, ww))
        if shrunk != (wh, ww):
            out.append((np.ascontiguousarray(image[y:y + wh, x:x + ww]), shrunk))
    return out


def opencv(image: np.ndarray, out_hw: tuple[int, int]) -> np.ndarray:
    return cv2.resize(image, (out_hw[1], out_hw[0]), interpolation=cv2.INTER_AREA)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    cv2.setNumThreads(1)
    tune_malloc(DEFAULT)
    if area_resize.KERNEL != "compiled kernel":
        raise SystemExit("the server was installed without its compiled kernel (no C "
                         "compiler): nothing to compare")
    work = windows(image_files(make_dataset(args.data, args.images)))
    for image, out_hw in work:  # the same bytes, or the comparison means nothing
        assert np.array_equal(area_resize.area_resize(image, out_hw), opencv(image, out_hw))
    taken = sum(area_resize._kernel_takes(image, out_hw) for image, out_hw in work)
    print(f"# area resize ({machine()})\n# {len(work)} windows that shrink ({taken} taken by "
          f"the kernel, the rest are whole-number scales), the same bytes from both; median "
          f"of {args.runs} interleaved runs (min-max)\n")

    def contender(resize: Callable[[np.ndarray, tuple[int, int]], np.ndarray]
                  ) -> Callable[[], float]:
        def run() -> float:
            start = time.thread_time()
            for image, out_hw in work:
                resize(image, out_hw)
            return (time.thread_time() - start) / len(work) * 1e3
        return run

    results = interleaved({"OpenCV INTER_AREA": contender(opencv),
                           "compiled kernel": contender(area_resize.area_resize)},
                          args.runs)
    table([(name, f"{median(ms):.3f}", spread(ms, "{:.3f}")) for name, ms in results.items()],
          ("contender", "CPU ms per resize", "spread"))
    print()
    table([("compiled kernel / OpenCV (target <= 0.6)",
            ratio(results["compiled kernel"], results["OpenCV INTER_AREA"]))],
          ("ratio (median of per-run ratios, spread)", "CPU per resize"))


if __name__ == "__main__":
    main()
