"""A batch of encoded images of mixed kinds and sizes for the batched decoder's tests: JPEGs
of each chroma subsampling, progressive, grayscale, EXIF-rotated and CMYK, and a PNG, at
four sizes."""

from __future__ import annotations

import cv2
import numpy as np
from PIL import Image

from tests.support.op_helpers import gradient, noise, pil_bytes

SIZES = ((61, 83), (17, 250), (120, 31), (8, 8))


def jpeg_kinds(h: int, w: int) -> dict[str, np.ndarray]:
    photo = cv2.add(gradient(h, w), noise(h, w, seed=h + w) // 4)
    rotated = Image.Exif()
    rotated[0x0112] = 6
    return {
        "4:2:0": pil_bytes(photo, "JPEG", quality=90, subsampling=2),
        "4:2:2": pil_bytes(photo, "JPEG", quality=90, subsampling=1),
        "4:4:4": pil_bytes(photo, "JPEG", quality=90, subsampling=0),
        "progressive": pil_bytes(photo, "JPEG", quality=85, progressive=True),
        "grayscale": pil_bytes(photo[:, :, 1], "JPEG", quality=90),
        "exif orientation 6": pil_bytes(photo, "JPEG", quality=90, exif=rotated),
        "cmyk": pil_bytes(Image.fromarray(photo).convert("CMYK"), "JPEG", quality=90),
        "png": pil_bytes(photo, "PNG"),
    }


def batch_of_mixed_sizes() -> tuple[list[str], list[np.ndarray]]:
    names, files = [], []
    for h, w in SIZES:
        for kind, data in jpeg_kinds(h, w).items():
            names.append(f"{kind} {h}x{w}")
            files.append(data)
    return names, files
