"""The probes' inputs: synthetic arrays computed with integer operations only (the same
bits on every machine), and the committed probe images the decoder reads."""

from __future__ import annotations

import functools
from importlib import resources

import numpy as np

from conveyor_server.engine import keyed_random

#: Odd extents: partial SIMD vectors, partial JPEG blocks, a centre between pixels.
SHAPES = ((29, 37), (16, 21), (7, 5))


def image(h: int, w: int, c: int = 3, dtype: str = "uint8", salt: int = 0) -> np.ndarray:
    """An HWC image of smooth ramps plus noise, from keyed bits: identical everywhere.
    A copy of the one computed per argument set (the behaviour probe asks for the same few
    images some 1,600 times at every server start); the caller may write to it."""
    return _image(h, w, c, dtype, salt).copy()


@functools.lru_cache(maxsize=256)
def _image(h: int, w: int, c: int, dtype: str, salt: int) -> np.ndarray:
    n = h * w * c
    raw = keyed_random.bits(0x9B0BE, salt, np.arange(n, dtype=np.uint64))
    noise = (raw >> np.uint64(58)).astype(np.int64).reshape(h, w, c)  # 0..63
    y, x, ch = np.meshgrid(np.arange(h), np.arange(w), np.arange(c), indexing="ij")
    ramp = (x * 160 // max(1, w - 1) + y * 64 // max(1, h - 1) + ch * 17) % 192
    values = ramp + noise  # 0..254
    if dtype == "float32":
        # Exact in float32: quarter steps, some negative and some above 255.
        out = ((values - 20) * 1.25 + 0.25).astype(np.float32)
    elif dtype == "uint16":
        out = (values * 257).astype(np.uint16)
    else:
        out = values.astype(np.dtype(dtype))
    out.setflags(write=False)  # the cached one is never handed out
    return out


def images(dtypes: tuple[str, ...] = ("uint8",), channels: tuple[int, ...] = (3, 1)
           ) -> list[np.ndarray]:
    return [image(h, w, c, dtype, salt=i)
            for i, (dtype, c, (h, w)) in enumerate(
                (d, c, s) for d in dtypes for c in channels for s in SHAPES)]


@functools.cache
def probe_files() -> tuple[tuple[str, bytes], ...]:
    """(name, bytes) of every committed probe image, sorted by name."""
    folder = resources.files(__package__) / "probe_images"
    return tuple(sorted((f.name, f.read_bytes()) for f in folder.iterdir()
                        if not f.name.startswith(".")))
