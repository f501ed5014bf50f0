"""Every CUDA kernel source compiles with NVRTC (the nvidia-cuda-nvrtc wheel, no GPU
needed) for two architectures, to PTX and to machine code, with no error or warning,
defines every kernel the launchers ask for, and fuses no multiply-add (the numpy
references round each product); a broken source fails the same check."""

from __future__ import annotations

import re

import pytest

from conveyor_server.engine.ops.cuda import sources
from tests.support import nvrtc

ARCHES = ("compute_80", "compute_90")


def _entries(ptx: str) -> set[str]:
    return set(re.findall(r"\.entry\s+(\w+)", ptx))


def test_the_wheel_is_cuda_13() -> None:
    assert nvrtc.version()[0] == 13


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("name", sorted(sources.KERNELS))
def test_every_kernel_source_compiles_cleanly(name: str, arch: str) -> None:
    compiled = nvrtc.compile_ptx(sources.source(name), name, arch, sources.OPTIONS)
    assert compiled.ok, compiled.log
    assert compiled.log == "", f"{name} ({arch}) compiled with warnings:\n{compiled.log}"
    entries = _entries(compiled.ptx)
    missing = set(sources.KERNELS[name]) - entries
    assert not missing, f"{name} does not define {sorted(missing)}"
    assert entries == set(sources.KERNELS[name]), "a kernel the launchers never ask for"
    # Products and sums are rounded one by one, as the references compute them.
    assert "fma.rn.f32" not in compiled.ptx and "fma.rn.f64" not in compiled.ptx


@pytest.mark.parametrize("arch", ("sm_80", "sm_90"))
@pytest.mark.parametrize("name", sorted(sources.KERNELS))
def test_every_kernel_source_assembles_to_machine_code(name: str, arch: str) -> None:
    # A real architecture runs ptxas inside NVRTC: the inline PTX (float16 conversions)
    # must assemble for the A100 and H100 generations.
    compiled = nvrtc.compile_ptx(sources.source(name), name, arch, sources.OPTIONS)
    assert compiled.ok and compiled.log == "", compiled.log
    assert compiled.cubin_bytes > 1000


def test_every_kernel_name_is_in_one_source() -> None:
    names = [k for kernels in sources.KERNELS.values() for k in kernels]
    assert len(names) == len(set(names))
    assert sources.source_of("warp_affine_uint8") == "warp.cu"
    with pytest.raises(KeyError):
        sources.source_of("warp_affine_float64")


def test_a_broken_source_fails_the_check() -> None:
    broken = sources.source("slice.cu").replace("const bool inside", "const bool inside = ;", 1)
    compiled = nvrtc.compile_ptx(broken, "slice.cu", ARCHES[0], sources.OPTIONS)
    assert not compiled.ok
    assert "slice.cu" in compiled.log and "error" in compiled.log
    assert compiled.ptx == ""


def test_a_warning_is_seen() -> None:
    # An unused variable: compiles, and the log the clean check asserts empty is not.
    src = sources.source("cast.cu") + '\nextern "C" __global__ void w() { int unused; }\n'
    compiled = nvrtc.compile_ptx(src, "cast.cu", ARCHES[0], sources.OPTIONS)
    assert compiled.ok
    assert "warning" in compiled.log
