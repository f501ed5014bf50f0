"""One declaration per operator: every operator the schemas declare is built, probed and
digested on each device it declares, and everything the server registers (builders, GPU
planners, readers, random draws, probes) names a declared operator and device."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conveyor import fn
from conveyor.definition.schemas.registry import SCHEMAS, OpSchema
from conveyor_server.engine import catalog
from conveyor_server.engine.ops import registry
from conveyor_server.engine.ops.cuda.ops import PLANNERS
from conveyor_server.engine.ops.probes.probe_set import OP_PROBES, SOURCE_PROBES
from conveyor_server.engine.readers.build import READERS
from conveyor_server.engine.stages.external_source import OP as EXTERNAL_SOURCE
from conveyor_server.engine.stages.random_ops import DRAWS

GOLDEN = Path(__file__).parent / "golden" / "behaviour.json"
LIST_KINDS = ("ints", "floats", "strings")


@pytest.fixture(scope="module", autouse=True)
def loaded() -> None:
    catalog.load()


def _sources() -> set[str]:
    """The operators built as source stages (not by the operator registry)."""
    return {*READERS, *DRAWS, EXTERNAL_SOURCE}


def _builders(op_type: str, device: str) -> list[registry.Per]:
    return [per for op, per, on in registry.registrations() if op == op_type and on == device]


@pytest.mark.parametrize("op_type", sorted(SCHEMAS))
def test_every_declared_device_has_a_builder(op_type: str) -> None:
    for device in SCHEMAS[op_type].devices:
        if op_type in _sources():
            assert device == "cpu", f"{op_type}: a source stage runs on the CPU only"
        else:
            assert _builders(op_type, device), f"{op_type}: no builder for device={device!r}"


@pytest.mark.parametrize("op_type", sorted(SCHEMAS))
def test_every_declared_operator_has_a_probe_and_a_golden_digest(op_type: str) -> None:
    assert (op_type in OP_PROBES) != (op_type in SOURCE_PROBES), \
        f"{op_type}: needs exactly one probe (op_probe or source_probe)"
    digests = json.loads(GOLDEN.read_text())["digests"]
    probe = OP_PROBES.get(op_type)
    for variant in probe.variants if probe is not None else ("",):
        key = f"{op_type}[{variant}]@cpu" if variant else f"{op_type}@cpu"
        assert key in digests, f"{op_type}: no golden digest {key!r} (regenerate {GOLDEN.name})"


@pytest.mark.parametrize("op_type", sorted(SCHEMAS))
def test_fn_makes_every_declared_operator(op_type: str) -> None:
    prefix, _, name = op_type.rpartition(".")
    made = getattr(getattr(fn, prefix), name) if prefix else getattr(fn, op_type)
    assert callable(made)


def test_every_registration_names_a_declared_operator_and_device() -> None:
    for op_type, per, device in registry.registrations():
        declared = SCHEMAS.get(op_type)
        assert declared is not None, f"builder per {per} for undeclared {op_type!r}"
        assert device in declared.devices, \
            f"{op_type}: a builder for device={device!r}, which its schema does not declare"
        assert op_type not in _sources()
    for what, names in (("GPU planner", PLANNERS), ("reader", READERS),
                        ("random draw", DRAWS), ("op probe", OP_PROBES),
                        ("source probe", SOURCE_PROBES)):
        undeclared = sorted(set(names) - set(SCHEMAS))
        assert not undeclared, f"{what}s for undeclared operators: {undeclared}"
    for op_type in PLANNERS:
        assert "gpu" in SCHEMAS[op_type].devices, f"{op_type}: a GPU planner, but no GPU device"
        assert _builders(op_type, "gpu") == [registry.BATCH]


def test_every_gpu_operator_but_the_decoders_has_a_planner() -> None:
    """A ``gpu`` operator runs on a planner; the decoders (``mixed`` too) have their own."""
    for op_type, declared in SCHEMAS.items():
        if "gpu" in declared.devices and "mixed" not in declared.devices:
            assert op_type in PLANNERS, f"{op_type}: declares device 'gpu' but has no planner"


def _flags(declared: OpSchema) -> list[tuple[str, str]]:
    return [(name, flag) for name, arg in declared.args.items()
            for flag in ("path", "extent", "unbounded") if getattr(arg, flag)]


@pytest.mark.parametrize("op_type", sorted(SCHEMAS))
def test_argument_flags_fit_their_kinds(op_type: str) -> None:
    declared = SCHEMAS[op_type]
    for name, flag in _flags(declared):
        kind = declared.args[name].kind
        allowed = {"path": ("str", "strings"), "extent": ("int", "float", "ints", "floats"),
                   "unbounded": LIST_KINDS}[flag]
        assert kind in allowed, f"{op_type}.{name}: {flag} on an argument of kind {kind}"
