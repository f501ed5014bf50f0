"""Write the decoder's canonical probe images (``engine/ops/probes/probe_images``).

Run once; the files are committed, so every server probes the same bytes. Each file is
small (an odd-sized 37 x 29 picture: partial JPEG blocks and SIMD tails) and takes one of
the decoder's code paths: JPEG subsamplings, progressive, grayscale, CMYK and an EXIF
rotation (OpenCV's path), PNG at 8 and 16 bits with and without alpha or a palette, BMP,
TIFF and WebP. Regenerating them changes every decoder digest: do it only on purpose.
"""

from __future__ import annotations

import io
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

OUT = Path(__file__).resolve().parents[1] / "server/conveyor_server/engine/ops/probes/probe_images"
H, W = 29, 37


def picture() -> np.ndarray:
    """A gradient with a hard edge and a checkerboard: smooth and sharp detail."""
    y, x = np.mgrid[0:H, 0:W]
    r = x * 255 // (W - 1)
    g = y * 255 // (H - 1)
    b = np.where((x // 3 + y // 3) % 2 == 0, 230, 20)
    b[:, W // 2:] = 255 - b[:, W // 2:]
    return np.dstack([r, g, b]).astype(np.uint8)


def pil_save(image: Image.Image, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    image.save(buf, fmt, **kw)
    return buf.getvalue()


def exif_rotated(rgb: Image.Image) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    return pil_save(rgb, "JPEG", quality=90, exif=exif.tobytes())


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rgb_array = picture()
    rgb = Image.fromarray(rgb_array)
    gray = rgb.convert("L")
    files = {
        "jpeg_420.jpg": pil_save(rgb, "JPEG", quality=85, subsampling=2),
        "jpeg_422.jpg": pil_save(rgb, "JPEG", quality=85, subsampling=1),
        "jpeg_444.jpg": pil_save(rgb, "JPEG", quality=95, subsampling=0),
        "jpeg_progressive.jpg": pil_save(rgb, "JPEG", quality=80, progressive=True),
        "jpeg_gray.jpg": pil_save(gray, "JPEG", quality=90),
        "jpeg_cmyk.jpg": pil_save(rgb.convert("CMYK"), "JPEG", quality=90),
        "jpeg_exif6.jpg": exif_rotated(rgb),
        "png_rgb.png": pil_save(rgb, "PNG"),
        "png_rgba.png": pil_save(rgb.convert("RGBA"), "PNG"),
        "png_gray.png": pil_save(gray, "PNG"),
        "png_palette.png": pil_save(rgb.convert("P"), "PNG"),
        "png_16bit.png": cv2.imencode(".png", rgb_array.astype(np.uint16) * 257 + 3)[1].tobytes(),
        "bmp_rgb.bmp": pil_save(rgb, "BMP"),
        "tiff_rgb.tif": pil_save(rgb, "TIFF"),
        "webp_lossy.webp": pil_save(rgb, "WEBP", quality=80),
        "webp_lossless.webp": pil_save(rgb, "WEBP", lossless=True),
    }
    for name, data in files.items():
        (OUT / name).write_bytes(data)
        print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
