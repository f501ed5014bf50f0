"""What computes a GPU pipeline's bytes: the GPU, its driver, the CUDA runtime, the decoder
libraries and the decode backends, in one line the engine identity records.

nvJPEG's CUDA and hardware decoders, and the CUDA operators, give bytes that depend on the
GPU model (compute capability), the driver (the hardware decoder's firmware) and the
library builds; which backend decodes which sample follows the backend plan and
``hw_decoder_load``. The behaviour probe cannot see all of that (the hardware decoder takes
only part of a batch), so a checkpoint of a GPU pipeline records this line and restores
only where it is the same (``engine_id.py``).
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

from conveyor_server.engine.ops.decode.nvimgcodec_batch import nvimgcodec_version

#: Where the nvJPEG wheels put the library, under the ``nvidia`` namespace package.
_NVJPEG_FILES = ("cu13/lib/libnvjpeg.so.13", "nvjpeg/lib/libnvjpeg.so.12",
                 "cu12/lib/libnvjpeg.so.12")


@dataclass(frozen=True)
class GpuPath:
    model: str
    #: "9.0" for an H100.
    compute_capability: str
    #: The driver's release (NVML) and the CUDA version it supports.
    driver: str
    cuda_runtime: str
    nvimgcodec: str
    nvjpeg: str

    def describe(self, backends: str = "") -> str:
        """``NVIDIA H100 80GB HBM3 (sm 9.0); driver 570.86.15 (CUDA 12.8); CUDA runtime
        12.6; nvImageCodec 0.9.0; nvJPEG 12.4.0``, then the decode backends if given."""
        line = (f"{self.model} (sm {self.compute_capability}); driver {self.driver}; "
                f"CUDA runtime {self.cuda_runtime}; nvImageCodec {self.nvimgcodec or 'none'}; "
                f"nvJPEG {self.nvjpeg or 'none'}")
        return f"{line}; decode backends {backends}" if backends else line


def cuda_version(encoded: int) -> str:
    """CUDA's version number (12060) as text (12.6)."""
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


def nvjpeg_version() -> str:
    """The nvJPEG library's version (major.minor.patch) as loaded here, or "" without one."""
    lib = _load_nvjpeg()
    if lib is None:
        return ""
    parts = []
    for prop in range(3):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
        value = ctypes.c_int()
        if lib.nvjpegGetProperty(prop, ctypes.byref(value)) != 0:
            return ""
        parts.append(str(value.value))
    return ".".join(parts)


def _load_nvjpeg() -> ctypes.CDLL | None:
    # The one nvImageCodec loaded (found by its name), else the one its wheel installed.
    for name in ("libnvjpeg.so.13", "libnvjpeg.so.12"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    try:
        import nvidia
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", []):
        for relative in _NVJPEG_FILES:
            try:
                return ctypes.CDLL(f"{root}/{relative}")
            except OSError:
                continue
    return None


def _driver_release() -> str:
    """The driver's release through NVML (``nvidia-ml-py``), or "" without it."""
    try:
        import pynvml
    except ImportError:
        return ""
    try:
        pynvml.nvmlInit()
        try:
            release = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML library or no driver
        return ""
    return release.decode() if isinstance(release, bytes) else str(release)


@functools.cache
def gpu_path(device_id: int) -> GpuPath:
    """The path of CUDA device ``device_id`` (-1: device 0) in this process."""
    import cupy

    ordinal = max(device_id, 0)
    runtime = cupy.cuda.runtime
    props = runtime.getDeviceProperties(ordinal)
    name = props["name"]
    model = name.decode() if isinstance(name, bytes) else str(name)
    release = _driver_release()
    supported = f"CUDA {cuda_version(runtime.driverGetVersion())}"
    driver = f"{release} ({supported})" if release else supported
    return GpuPath(model=model, compute_capability=f"{props['major']}.{props['minor']}",
                   driver=driver, cuda_runtime=cuda_version(runtime.runtimeGetVersion()),
                   nvimgcodec=nvimgcodec_version(), nvjpeg=nvjpeg_version())
