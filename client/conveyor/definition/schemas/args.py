"""What an operator schema is made of: ``Arg`` (one argument), ``OpSchema`` (an
operator), and the arguments many operators share. ``schema.py`` assembles the schemas
from these (``reader_schemas.py`` holds some of them) and validates arguments against them.

A schema is an operator's one declaration: its arguments and their flags (``path``,
``extent``, ``unbounded``, ``tensor``), the devices it runs on and the rule fixing its
output's size (``output_sizes.py``). ``fn`` makes its call from it, a server bounds specs
by it (``engine/admission/spec_bounds.py``), registers its builders, GPU planners and behaviour
probes under its name, and the operator reference is generated from it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from conveyor.definition.schemas.output_sizes import FixedOutput

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
    #: A file path (or, for a list, each entry): every component is at most ``NAME_MAX``
    #: bytes long, checked as a spec arrives.
    path: bool = False
    #: A height or a width in pixels (one number, or each of a list): at most the server's
    #: ``limits.max_extent``.
    extent: bool = False
    #: A list whose length follows the data set (file lists, labels): bounded by the
    #: spec's encoded size alone, not by ``max_list_items``.
    unbounded: bool = False


#: An operator's output-size rule (``output_sizes.py`` has them).
OutputRule = Callable[[Mapping[str, Any], Collection[str]], FixedOutput | None]
#: The devices of an operator with only a CPU form, and of one with a GPU form too
#: (``device="gpu"``: batched CUDA kernels on the server's GPU).
CPU: tuple[str, ...] = ("cpu",)
CPU_GPU: tuple[str, ...] = ("cpu", "gpu")


@dataclass(frozen=True)
class OpSchema:
    num_inputs: int
    outputs: tuple[str, ...]
    args: Mapping[str, Arg] = field(default_factory=dict)
    #: The spec devices it runs on: "cpu", "mixed" (a decoder with GPU output), "gpu".
    devices: tuple[str, ...] = CPU
    #: The list argument with one entry per output, for operators whose outputs the user
    #: chooses (``readers.webdataset``'s ``ext``); empty: ``outputs`` is fixed.
    outputs_from: str = ""
    #: The outputs' names given the arguments (defaults filled in), for operators whose
    #: outputs follow flags and counts (``readers.caffe2``'s ``label_type``, ...); None:
    #: ``outputs`` (or ``outputs_from``) says.
    outputs_by: Callable[[Mapping[str, Any]], tuple[str, ...]] | None = None
    #: The output's size where the constant arguments fix it: called with the arguments
    #: (defaults filled in) and the names of those fed per sample; None from it, or no
    #: rule: the size follows the data (checked as each sample is made).
    fixed_output: OutputRule | None = None
    #: The most positional inputs it takes where some are optional (``transforms.*``: an
    #: input matrix or none; ``transforms.combine``: two or more); None: ``num_inputs``
    #: exactly.
    max_inputs: int | None = None

    @property
    def input_counts(self) -> range:
        """The numbers of positional inputs it takes."""
        return range(self.num_inputs, (self.max_inputs or self.num_inputs) + 1)

    def inputs_text(self) -> str:
        """Its input count in words: "1", "0 or 1", "2 to 99"."""
        counts = self.input_counts
        if len(counts) == 1:
            return str(self.num_inputs)
        return f"{counts[0]} or {counts[-1]}" if len(counts) == 2 else \
            f"{counts[0]} to {counts[-1]}"
    #: Argument inputs it also takes as optional positional inputs after its
    #: ``num_inputs`` ones, in order: ``fn.warp_affine(images, mtx)`` records ``mtx`` as
    #: the argument input ``matrix``, as DALI's second input.
    input_args: tuple[str, ...] = ()
    #: Other names ``fn`` gives it (``experimental.equalize`` for ``equalize``, as DALI
    #: has both); specs always carry the operator's own name.
    aliases: tuple[str, ...] = ()
    #: What it computes, for the operator reference (Markdown; empty: the table alone).
    doc: str = ""


SEED_ARGS = {"seed": Arg("int", default=-1, minimum=-1)}
ON_ERROR_ARGS = {"on_error": Arg("enum", default="fail", choices=ON_ERROR)}
