"""The GPU image and extras bring the CUDA headers CuPy compiles with (offline: the
declared requirements, not an install).

CuPy 14 compiles every kernel with NVRTC, the engine's RawModules and its own copy kernels
alike, and first looks for ``cuda_runtime.h`` (through cuda-pathfinder: a wheel's
``nvidia/cu13/include`` or ``nvidia/cuda_runtime/include``, conda, ``CUDA_PATH``, a
system toolkit); without it every GPU operator fails at first use with "Failed to find
CUDA headers". CUDA's ``-runtime`` images have no headers, and the plain ``cupy-cudaXXx``
wheel depends only on numpy and cuda-pathfinder, so the server's GPU extra must name a
distribution that ships them, of the image's CUDA major version.

Which distributions ship the headers was checked by hand (pip download, then CuPy 14.2's
own check, ``cupy._core.core.assemble_cupy_compiler_options``, with no toolkit on the
machine): nvidia-cuda-runtime-cu12 12.9.79 has nvidia/cuda_runtime/include/cuda_runtime.h,
nvidia-cuda-runtime 13.5.37 has nvidia/cu13/include/cuda_runtime.h; CuPy's ``[ctk]``
extra pulls the same distribution (through cuda-toolkit[cudart]).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.project.test_deploy import dockerfile_stages

ROOT = Path(__file__).resolve().parents[2]
#: Per CUDA major version: the distribution with the headers, and NVRTC's.
HEADER_WHEELS = {12: "nvidia-cuda-runtime-cu12", 13: "nvidia-cuda-runtime"}
NVRTC_WHEELS = {12: "nvidia-cuda-nvrtc-cu12", 13: "nvidia-cuda-nvrtc"}
#: The GPU extra each CUDA major version's image installs.
EXTRAS = {12: "gpu", 13: "gpu-cu13"}


def _within_major(req: Requirement, major: int) -> bool:
    """Every version ``req`` admits is a ``major``.x release (and some are)."""
    spec = req.specifier
    inside = [Version(f"{major}.{minor}") for minor in (0, 2, 9, 99)]
    outside = [Version(f"{major - 1}.9"), Version(f"{major + 1}.0"), Version(f"{major + 1}.5")]
    return any(spec.contains(v) for v in inside) and not any(spec.contains(v) for v in outside)


def brings_headers(requirements: list[str], major: int) -> bool:
    """Whether installing ``requirements`` installs CUDA ``major``'s runtime headers:
    CuPy's [ctk] extra, or the header distribution of that major version."""
    reqs = [Requirement(r) for r in requirements]
    if any(r.name == f"cupy-cuda{major}x" and "ctk" in r.extras for r in reqs):
        return True
    return any(r.name == HEADER_WHEELS[major] and _within_major(r, major) for r in reqs)


def brings_nvrtc(requirements: list[str], major: int) -> bool:
    reqs = [Requirement(r) for r in requirements]
    if any(r.name == f"cupy-cuda{major}x" and "ctk" in r.extras for r in reqs):
        return True
    return any(r.name == NVRTC_WHEELS[major] and _within_major(r, major) for r in reqs)


def extras() -> dict[str, list[str]]:
    meta = tomllib.loads((ROOT / "server" / "pyproject.toml").read_text())
    found: dict[str, list[str]] = meta["project"]["optional-dependencies"]
    return found


def test_the_check_tells_a_header_wheel_from_none() -> None:
    assert not brings_headers(["cupy-cuda13x>=14", "nvidia-nvjpeg>=13,<14"], 13)
    assert brings_headers(["cupy-cuda13x[ctk]>=14"], 13)
    assert not brings_headers(["cupy-cuda12x[ctk]>=14"], 13)  # another CUDA's
    assert brings_headers(["cupy-cuda13x>=14", "nvidia-cuda-runtime>=13,<14"], 13)
    assert not brings_headers(["nvidia-cuda-runtime>=12"], 13)  # admits 12.x and 14.x
    assert not brings_headers(["nvidia-cuda-runtime>=13"], 13)  # admits 14.x
    assert brings_headers(["nvidia-cuda-runtime-cu12>=12.2,<13"], 12)
    assert not brings_headers(["nvidia-cuda-runtime>=13,<14"], 12)
    assert brings_nvrtc(["nvidia-cuda-nvrtc-cu12>=12.2,<13"], 12)
    assert not brings_nvrtc(["nvidia-cuda-runtime-cu12>=12.2,<13"], 12)


@pytest.mark.parametrize("major", sorted(EXTRAS))
def test_each_gpu_extra_brings_the_headers_and_nvrtc_of_its_cuda(major: int) -> None:
    requirements = extras()[EXTRAS[major]]
    assert any(Requirement(r).name == f"cupy-cuda{major}x" for r in requirements)
    assert brings_headers(requirements, major), (
        f"server[{EXTRAS[major]}] installs no CUDA {major} headers (cuda_runtime.h): CuPy "
        f"compiles no kernel without them; add {HEADER_WHEELS[major]} (or cupy-cuda{major}x"
        f"[ctk]): {requirements}")
    assert brings_nvrtc(requirements, major), requirements
    # CuPy 14 finds a wheel's headers through cuda-pathfinder (its dependency).
    cupy = next(Requirement(r) for r in requirements
                if Requirement(r).name == f"cupy-cuda{major}x")
    assert not cupy.specifier.contains(Version("13.6")), cupy


def test_each_gpu_image_has_the_headers_through_its_base_or_its_extra() -> None:
    """A ``-devel`` base has the headers; a ``-runtime`` one must install an extra that
    brings them, and the build checks CuPy finds them."""
    stages = dockerfile_stages()
    args = dict(rest.split("=", 1) for kw, rest in stages[""] if kw == "ARG")
    requirements = extras()
    for major, extra in EXTRAS.items():
        image = args[f"CUDA{major}_IMAGE"]
        base = stages[f"cuda{major}"]
        assert ("ENV", f"CONVEYOR_GPU_EXTRA={extra}") in base
        if "-devel-" in image:
            continue
        assert re.search(r"-(runtime|base)-", image), image
        assert brings_headers(requirements[extra], major), (image, extra)
    install = " ".join(rest for kw, rest in stages["gpu"] if kw == "RUN")
    assert "[${CONVEYOR_GPU_EXTRA}]" in install
    after = install.split("[${CONVEYOR_GPU_EXTRA}]", 1)[1]
    assert "find_nvidia_header_directory" in after and "'cudart'" in after, \
        "the gpu stage must fail its build when CuPy would find no headers"
