"""A small real image data set (JPEGs in class folders) for the demo, tests and benchmarks.

Images are drawn from a seeded NumPy generator local to each image: the data set is the
same on every machine.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np


def make_image(seed: int, height: int, width: int) -> np.ndarray:
    """A smooth, distinct RGB image (gradients and a disc) for sample ``seed``."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    c = rng.uniform(0, 255, size=(3, 3))
    img = np.stack([c[k, 0] * x / width + c[k, 1] * y / height + c[k, 2] for k in range(3)], -1)
    cy, cx, r = rng.uniform(0.2, 0.8) * height, rng.uniform(0.2, 0.8) * width, height / 4
    img[(y - cy) ** 2 + (x - cx) ** 2 < r * r] = rng.uniform(0, 255, size=3)
    return np.clip(img, 0, 255).astype(np.uint8)


def make_image_folder(
    root: Path, counts: tuple[int, ...] = (5, 4, 6), size: tuple[int, int] = (40, 56),
    quality: int = 90,
) -> Path:
    """``root/class_k/img_i.jpg`` with ``counts[k]`` images in class k; sizes vary a little."""
    root.mkdir(parents=True, exist_ok=True)
    n = 0
    for k, count in enumerate(counts):
        folder = root / f"class_{k}"
        folder.mkdir(exist_ok=True)
        for i in range(count):
            h, w = size[0] + (n % 3) * 2, size[1] + (n % 4) * 2
            rgb = make_image(n, h, w)
            ok, buf = cv2.imencode(".jpg", rgb[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, quality])
            assert ok
            (folder / f"img_{i:03d}.jpg").write_bytes(buf.tobytes())
            n += 1
    return root
