"""NVRTC through ctypes, from the ``nvidia-cuda-nvrtc`` wheel: compiles CUDA C to PTX on a
machine with no GPU and no CUDA toolkit (the GPU kernels' compile check in CI)."""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from pathlib import Path


@functools.cache
def library() -> ctypes.CDLL:
    """libnvrtc from the CUDA 13 wheel (``nvidia/cu13/lib``; a CUDA 12 wheel of the gpu
    extra may sit beside it); ``OSError`` if it is not installed."""
    import nvidia  # the wheels' namespace package

    for root in nvidia.__path__:
        for found in sorted(Path(root).glob("cu13/lib/libnvrtc.so.13*")):
            return ctypes.CDLL(str(found))
    raise OSError("libnvrtc not found: install the nvidia-cuda-nvrtc wheel (the test extra)")


@dataclass(frozen=True)
class Compiled:
    ok: bool
    log: str
    #: The PTX, for a virtual architecture ("compute_90").
    ptx: str
    #: The size of the machine code (assembled by ptxas inside NVRTC), for a real
    #: architecture ("sm_90").
    cubin_bytes: int


def version() -> tuple[int, int]:
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(library().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


def _check(result: int, what: str) -> None:
    if result != 0:
        lib = library()
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        raise RuntimeError(f"{what}: {lib.nvrtcGetErrorString(result).decode()}")


def compile_ptx(source: str, name: str, arch: str, options: tuple[str, ...] = ()) -> Compiled:
    """Compile ``source`` for ``arch``: whether it compiled, the log (errors and warnings),
    and the PTX (a virtual architecture, "compute_90") or the machine code's size (a real
    one, "sm_90")."""
    lib = library()
    prog = ctypes.c_void_p()
    _check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0,
                                  None, None), "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={arch}".encode(), *(o.encode() for o in options)]
        argv = (ctypes.c_char_p * len(opts))(*opts)
        result = lib.nvrtcCompileProgram(prog, len(opts), argv)
        size = ctypes.c_size_t()
        _check(lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "nvrtcGetProgramLogSize")
        log = ctypes.create_string_buffer(size.value)
        _check(lib.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
        ptx, cubin = b"", 0
        if result == 0 and arch.startswith("compute_"):
            _check(lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
            buf = ctypes.create_string_buffer(size.value)
            _check(lib.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
            ptx = buf.value
        elif result == 0:
            _check(lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "nvrtcGetCUBINSize")
            cubin = size.value
        return Compiled(result == 0, log.value.decode(errors="replace").strip(),
                        ptx.decode(errors="replace"), cubin)
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
