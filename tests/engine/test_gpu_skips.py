"""The GPU decoder's tests (tests/engine/test_gpu.py) skip, with the reason, on a host that has a
CUDA device but no usable nvImageCodec, rather than failing at the first decode."""

from __future__ import annotations

import sys

import pytest

from conveyor_server.engine.device.devices import cuda_device_count
from tests.engine import test_gpu


def test_a_gpu_host_without_nvimgcodec_skips_naming_the_extra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(test_gpu, "cuda_device_count", lambda: 1)
    monkeypatch.setitem(sys.modules, "nvidia.nvimgcodec", None)  # import fails
    nvidia = sys.modules.get("nvidia")
    if nvidia is not None:  # imported already: ``from nvidia import`` reads the attribute
        monkeypatch.delattr(nvidia, "nvimgcodec", raising=False)
    reason = test_gpu.gpu_decoder_missing()
    assert reason.startswith("needs nvImageCodec (the server's [gpu] or [gpu-cu13] extra)")


def test_an_nvimgcodec_that_cannot_decode_on_the_device_skips() -> None:
    """Here: nvImageCodec is installed (the test extra's CPU build) and there is no CUDA
    device, so a decoder on device 0 is refused and that is the reason given."""
    pytest.importorskip("nvidia.nvimgcodec")
    if cuda_device_count() > 0:
        pytest.skip("this host has a CUDA device: the decoder may well work here")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(test_gpu, "cuda_device_count", lambda: 1)
        reason = test_gpu.gpu_decoder_missing()
    assert reason.startswith("nvImageCodec cannot decode on CUDA device 0"), reason


def test_a_host_without_a_device_skips_as_conftest_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(test_gpu, "cuda_device_count", lambda: 0)
    assert test_gpu.gpu_decoder_missing() == "needs a CUDA device; this machine has none"
