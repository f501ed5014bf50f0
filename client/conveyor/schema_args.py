"""What an operator schema is made of: ``Arg`` (one argument), ``OpSchema`` (an
operator), and the arguments many operators share. ``schema.py`` assembles the schemas
from these (``reader_schemas.py`` holds some of them) and validates arguments against them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: What happens to a sample whose file cannot be read or decoded: the pipeline stops
#: ("fail"), the sample is left out of its batch ("skip"), or the batch's next good sample
#: takes its place ("replace"). Decided by the batch's position alone, so resume is exact.
ON_ERROR = ("fail", "skip", "replace")


@dataclass(frozen=True)
class Arg:
    """One argument: ``kind`` is int, float, bool, str, ints, floats, strings or enum."""

    kind: str
    default: Any = None
    choices: tuple[str, ...] = ()
    #: May be fed per sample by another operator's output (``angle=angles``).
    tensor: bool = False
    required: bool = False
    #: For list kinds: allowed lengths (empty: any).
    lengths: tuple[int, ...] = ()
    minimum: float | None = None
    maximum: float | None = None


@dataclass(frozen=True)
class OpSchema:
    num_inputs: int
    outputs: tuple[str, ...]
    args: Mapping[str, Arg] = field(default_factory=dict)
    devices: tuple[str, ...] = ("cpu",)
    #: The list argument with one entry per output, for operators whose outputs the user
    #: chooses (``readers.webdataset``'s ``ext``); empty: ``outputs`` is fixed.
    outputs_from: str = ""
    #: The outputs' names given the arguments (defaults filled in), for operators whose
    #: outputs follow flags and counts (``readers.caffe2``'s ``label_type``, ...); None:
    #: ``outputs`` (or ``outputs_from``) says.
    outputs_by: Callable[[Mapping[str, Any]], tuple[str, ...]] | None = None


SEED_ARGS = {"seed": Arg("int", default=-1, minimum=-1)}
ON_ERROR_ARGS = {"on_error": Arg("enum", default="fail", choices=ON_ERROR)}
