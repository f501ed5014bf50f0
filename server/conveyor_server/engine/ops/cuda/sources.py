"""The CUDA C sources of the GPU operators, and the kernels each one defines.

The sources are package data (``kernels/*.cu``), each compiled as one module with
``kernels/common.cuh`` (sample types, loads, saturating stores) in front of it: no headers,
so NVRTC compiles them on any machine (CI compiles every one, ``tests/engine/test_cuda_nvrtc.py``).
Kernels are ``extern "C"`` and batched: one launch per operator per batch, every sample's
shape, offsets and parameters passed as device arrays, nothing compiled per shape.
``KERNELS`` lists, per source, every kernel name the launchers ask for.
"""

from __future__ import annotations

import functools
from importlib import resources

#: Sample types (numpy names) per kernel family; the .cu files instantiate exactly these.
WARP_TYPES = ("uint8", "uint16", "int16", "float32")
RESIZE_TYPES = WARP_TYPES
CMN_INPUTS = ("uint8", "float16", "float32")
CMN_OUTPUTS = ("float32", "float16", "uint8", "int8")
CAST_TYPES = ("uint8", "int8", "uint16", "int16", "int32", "float16", "float32")
COLOR_TYPES = ("uint8", "int16", "uint16", "float16", "float32")
#: Element sizes the copying kernels (crop, flip) take.
SLICE_ITEMSIZES = (1, 2, 4, 8)

#: Compile options: no fused multiply-adds anywhere (the kernels use _rn intrinsics too).
OPTIONS = ("--fmad=false",)

KERNELS: dict[str, tuple[str, ...]] = {
    "slice.cu": tuple(f"slice_flip_{n}" for n in SLICE_ITEMSIZES),
    "warp.cu": tuple(f"warp_affine_{t}" for t in WARP_TYPES),
    "resize.cu": tuple(f"resize_{p}_{t}" for p in ("first", "second") for t in RESIZE_TYPES),
    "normalize.cu": tuple(f"crop_mirror_normalize_{s}_{d}"
                          for s in CMN_INPUTS for d in CMN_OUTPUTS),
    "cast.cu": tuple(f"cast_{s}_{d}" for s in CAST_TYPES for d in CAST_TYPES),
    "color.cu": tuple(f"{k}_{s}_{d}" for k in ("brightness_contrast", "color_matrix")
                      for s in COLOR_TYPES for d in COLOR_TYPES),
}


def _read(name: str) -> str:
    return (resources.files("conveyor_server.engine.ops.cuda") / "kernels" / name).read_text()


@functools.cache
def source(name: str) -> str:
    """The full text NVRTC compiles for ``name`` (a key of ``KERNELS``)."""
    if name not in KERNELS:
        raise KeyError(f"no kernel source {name!r} (sources: {sorted(KERNELS)})")
    return f"{_read('common.cuh')}\n#line 1 \"{name}\"\n{_read(name)}"


def source_of(kernel: str) -> str:
    """The source (a key of ``KERNELS``) that defines ``kernel``."""
    for name, kernels in KERNELS.items():
        if kernel in kernels:
            return name
    raise KeyError(f"no kernel {kernel!r} is defined")
