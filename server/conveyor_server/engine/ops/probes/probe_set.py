"""The probe set: what a probe is, and the registry every probe adds itself to.

``op_probe`` registers an operator's cases, ``source_probe`` a random source's, a reader's
or the external source's outputs. Each probe is in its operator's module, beside its
builders (``engine/ops/geometry/rotate.py``, ``engine/readers/numpy_reader.py``,
``engine/stages/random_ops.py``, ...); ``engine/catalog.py`` imports them all, which fills
``OP_PROBES`` and ``SOURCE_PROBES``. Every operator the schemas declare has a probe (a test
checks it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from conveyor.definition.schemas.registry import schema_of
from conveyor_server.engine.ops.registry import SAMPLE_INDEX

Targs = dict[str, np.ndarray]


@dataclass(frozen=True)
class Case:
    args: Mapping[str, Any]
    #: (inputs, per-sample arguments) of each sample, in batch order.
    samples: Sequence[tuple[Sequence[np.ndarray], Targs]]
    input_layouts: tuple[str, ...] = ("HWC",)


@dataclass(frozen=True)
class OpProbe:
    cases: Callable[[str], list[Case]]
    #: The argument whose value selects the implementation ("" when none).
    variant_arg: str = ""
    variants: tuple[str, ...] = ("",)


#: A source probe: the arrays it outputs (draws, orders).
SourceProbe = Callable[[], list[np.ndarray]]

OP_PROBES: dict[str, OpProbe] = {}
SOURCE_PROBES: dict[str, SourceProbe] = {}


def op_probe(op_type: str, variant_arg: str = "") -> Callable[[Callable[[str], list[Case]]],
                                                             Callable[[str], list[Case]]]:
    def add(cases: Callable[[str], list[Case]]) -> Callable[[str], list[Case]]:
        variants = schema_of(op_type).args[variant_arg].choices if variant_arg else ("",)
        OP_PROBES[op_type] = OpProbe(cases, variant_arg, variants)
        return cases
    return add


def source_probe(op_type: str) -> Callable[[Callable[[], list[np.ndarray]]],
                                            Callable[[], list[np.ndarray]]]:
    def add(outputs: Callable[[], list[np.ndarray]]) -> Callable[[], list[np.ndarray]]:
        SOURCE_PROBES[op_type] = outputs
        return outputs
    return add


def variant_of(op_type: str, args: Mapping[str, Any]) -> str:
    """The variant a configured operator uses ("" for operators without variants)."""
    probe = OP_PROBES.get(op_type)
    return str(args[probe.variant_arg]) if probe is not None and probe.variant_arg else ""


def f32(value: float) -> np.ndarray:
    return np.asarray(value, dtype=np.float32)


def i32(value: int) -> np.ndarray:
    return np.asarray(value, dtype=np.int32)


def indexed(samples: Sequence[tuple[Sequence[np.ndarray], Targs]],
            first: int = 0) -> list[tuple[Sequence[np.ndarray], Targs]]:
    """Samples with their global index, for operators whose draws are keyed by it."""
    return [(inputs, {**targs, SAMPLE_INDEX: np.array(first + i, dtype=np.uint64)})
            for i, (inputs, targs) in enumerate(samples)]
