"""OpenCV's CPU paths, chosen when the engine loads: by default an AVX-512 node computes
every behaviour key as an AVX2 node does (``engine/identity/cpu_paths.py``)."""

from __future__ import annotations

import logging
import os

import pytest

from conveyor.errors import InvalidArgument
from conveyor_server.engine.identity import cpu_paths
from conveyor_server.engine.identity.behaviour.reference import measure_in
from conveyor_server.engine.identity.cpu_paths import (
    AVX2_PATHS,
    PATHS_VARIABLE,
    library_variables,
    pin,
)

#: What an AVX2 node runs, as far as this CPU can be made to: OpenCV's and numpy's AVX-512
#: dispatch off, IPP on its AVX2 build (the build an AVX2 CPU picks by itself).
AVX2_NODE = {"OPENCV_CPU_DISABLE": "AVX512-SKX", "OPENCV_IPP": "avx2",
             "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR"}
OWN = (PATHS_VARIABLE, "OPENCV_IPP", "OPENCV_CPU_DISABLE", "NPY_DISABLE_CPU_FEATURES")


def test_portable_holds_an_avx512_cpu_to_the_avx2_paths_only() -> None:
    assert library_variables("portable", avx512=True) == AVX2_PATHS
    assert library_variables("portable", avx512=False) == {}
    assert library_variables("native", avx512=True) == {}


def test_an_unknown_choice_is_refused_naming_the_variable() -> None:
    with pytest.raises(InvalidArgument, match=f"{PATHS_VARIABLE}: 'fast' is not one of "
                                              "portable, native"):
        library_variables("fast", avx512=True)


def test_pin_sets_only_what_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_paths, "has_avx512", lambda: True)
    env = {"OPENCV_IPP": "disabled"}  # an operator's own setting
    assert pin(env, loaded={}) == {"OPENCV_CPU_DISABLE": "AVX512-SKX"}
    assert env == {"OPENCV_IPP": "disabled", "OPENCV_CPU_DISABLE": "AVX512-SKX"}
    native = {PATHS_VARIABLE: " Native "}
    assert pin(native, loaded={}) == {} and native == {PATHS_VARIABLE: " Native "}
    monkeypatch.setattr(cpu_paths, "has_avx512", lambda: False)
    other: dict[str, str] = {}
    assert pin(other, loaded={}) == {} and other == {}


def test_pin_cannot_act_once_opencv_is_loaded(monkeypatch: pytest.MonkeyPatch,
                                              caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(cpu_paths, "has_avx512", lambda: True)
    env: dict[str, str] = {}
    with caplog.at_level(logging.WARNING, logger="conveyor.engine"):
        assert pin(env, loaded={"cv2": object()}) == {}
    assert env == {} and "OpenCV was loaded before the engine" in caplog.text
    assert "OPENCV_IPP=avx2" in caplog.text


@pytest.mark.skipif(not cpu_paths.has_avx512(),
                    reason="this CPU has no AVX-512: it runs the AVX2 paths already")
def test_an_avx512_node_computes_what_an_avx2_node_computes() -> None:
    """Every behaviour key of a new process on this AVX-512 CPU, with the default paths,
    equals that of the same CPU held to what an AVX2 node runs; with its native paths, some
    keys differ (otherwise the pin would be needless here, and this test would not tell)."""
    portable = measure_in({}, unset=OWN)
    avx2_node = measure_in(AVX2_NODE, unset=OWN)
    native = measure_in({PATHS_VARIABLE: "native"}, unset=OWN)
    assert "ipp avx2" in portable["cpu"] and "AVX512-SKX" not in portable["cpu"]
    assert portable["digests"] == avx2_node["digests"]
    changed = sorted(k for k, v in native["digests"].items() if portable["digests"][k] != v)
    assert changed, f"native paths compute the AVX2 bytes here too ({native['cpu']})"


def test_the_engine_pinned_this_process() -> None:
    """conftest imports the engine before any test module loads OpenCV, so in-process
    pipelines compute what the servers the tests start compute."""
    if not cpu_paths.has_avx512() or os.environ.get(PATHS_VARIABLE, "portable") != "portable":
        pytest.skip("no AVX-512 here, or native paths chosen: nothing to pin")
    import cv2

    assert os.environ["OPENCV_IPP"] == "avx2"
    assert "*AVX512-SKX?" in cv2.getCPUFeaturesLine().split()  # dispatch turned off
