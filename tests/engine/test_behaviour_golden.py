"""The golden behaviour digests: any change to any operator's output on the canonical
probes fails here, so a release that keeps these keeps every checkpoint valid.

Measured in a new process in the reference environment (no optional SIMD paths, no IPP),
which every x86-64 machine computes alike, with the pinned library versions
(server/constraints.txt). If an output changed on purpose, regenerate the file:

    .venv/bin/python scripts/golden_behaviour.py > tests/engine/golden/behaviour.json

Servers of the new version then refuse checkpoints that use the changed operators.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

import pytest

from conveyor_server.engine.identity.behaviour.reference import measure_in, reference_environment

GOLDEN = Path(__file__).parent / "golden" / "behaviour.json"


@pytest.fixture(scope="module")
def measured() -> dict[str, Any]:
    return measure_in(reference_environment())


def test_the_reference_environment_turns_the_optional_paths_off(measured: dict[str, Any]) -> None:
    assert measured["cpu"].endswith("numpy baseline; opencv baseline; no ipp")


def test_every_digest_equals_the_golden_one(measured: dict[str, Any]) -> None:
    golden = json.loads(GOLDEN.read_text())
    if platform.machine() != golden["machine"]:
        pytest.skip(f"the golden digests are for {golden['machine']}; this is "
                    f"{platform.machine()}")
    assert measured["libraries"] == golden["libraries"], (
        "the installed libraries differ from the golden file's: install the pinned ones "
        "(make) before comparing outputs")
    assert measured["output_version"] == golden["output_version"]
    changed = {key: (golden["digests"].get(key), now)
               for key, now in measured["digests"].items() if golden["digests"].get(key) != now}
    gone = sorted(set(golden["digests"]) - set(measured["digests"]))
    assert not changed and not gone, (
        f"operator outputs changed on the canonical probes: {changed} (golden, now); no longer "
        f"measured: {gone}. If intended, regenerate {GOLDEN.name} (see this module).")
