"""The schemas of ``external_source`` and ``decoders.image_slice`` (part of
``schema.SCHEMAS``), with DALI's argument names.

``external_source``: ``source`` names a ``"module:function"`` callable (a server calls only
those its configuration lists); ``num_outputs`` 0 means one output returned as is (DALI's
``None``), n > 0 means the callable returns a tuple of n. ``dtype``, ``ndim`` and
``layout`` are given once or once per output. ``parallel`` calls the source in the
pipeline's worker processes (``py_num_workers``), ``prefetch_queue_depth`` batches ahead;
neither changes a byte, so a checkpoint restores with other values of them (the spec
records them; the fingerprint leaves them out). ``no_copy`` changes nothing here.

``random.choice``: a random draw per sample (keyed by the global sample index, as the
other ``random.*`` operators) from ``a``, given as DALI's first input or by name: a
constant list of values, or one integer ``n`` for ``0 .. n-1`` (a list of one whole number
reads as ``n``: the argument records both as a list).

``python_function``: ``function`` names a ``"module:function"`` callable, as
``external_source``'s ``source`` (a server calls only those its configuration lists in
``external_sources``; in process any callable), run on each sample's inputs (or, with
``batch_processing``, on lists of the batch's samples) for ``num_outputs`` outputs.

``decoders.image_slice``: inputs ``data`` (encoded image), ``anchor`` and ``shape`` (one
number per axis of ``axis_names``, else ``axes``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conveyor.definition.schemas.args import ON_ERROR_ARGS, SEED_ARGS, Arg, OpSchema

#: What an external source's outputs may hold.
SOURCE_DTYPES = ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
                 "float16", "float32", "float64", "bool")
#: The most outputs one external source may have.
MAX_SOURCE_OUTPUTS = 64


def source_outputs(args: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(f"output{i}" for i in range(max(1, args["num_outputs"])))


def function_outputs(args: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(f"output{i}" for i in range(args["num_outputs"]))


SOURCE_SCHEMAS = {
    "python_function": OpSchema(
        0, ("output0",),
        {"function": Arg("str", required=True),
         "num_outputs": Arg("int", default=1, minimum=0, maximum=MAX_SOURCE_OUTPUTS),
         "batch_processing": Arg("bool", default=False),
         "output_layouts": Arg("strings"), **SEED_ARGS},
        max_inputs=MAX_SOURCE_OUTPUTS, outputs_by=function_outputs,
        doc="Runs a Python function on its inputs' samples (numpy arrays; with "
            "`batch_processing=True`, lists of the batch's samples, returned as lists): one "
            "array per output, `num_outputs` of them (a tuple when more than one). A spec "
            "names the function `\"module:function\"`: a server runs only the functions its "
            "configuration lists in `external_sources`, in process any callable. The "
            "function must be pure (its outputs follow from its inputs alone): resume and "
            "the stream's identity take its name for its behaviour, so keeping it pure, "
            "and its name for one behaviour, is the user's part.",
    ),
    "random.choice": OpSchema(
        0, ("values",),
        {"a": Arg("floats", required=True), "p": Arg("floats", minimum=0, maximum=1),
         "shape": Arg("ints", default=(), minimum=0), **SEED_ARGS},
        input_args=("a",),
        doc="Draws `shape` values per sample (one when `shape` is not given) from `a`: a "
            "constant list, or an integer `n` for `0 .. n-1`, with the probabilities `p` "
            "(one per value, summing to 1; unset: equal). The output is int32 when every "
            "value of `a` is a whole number, else float32 (DALI: the type of `a`). Draws are "
            "keyed by the pipeline's seed, the operator and the global sample index: the "
            "same on every server and thread count, though not DALI's numbers.",
    ),
    "external_source": OpSchema(
        0,
        ("output0",),
        {
            "source": Arg("str", required=True),
            "batch": Arg("bool", default=True),
            "batch_info": Arg("bool", default=False),
            "num_outputs": Arg("int", default=0, minimum=0, maximum=MAX_SOURCE_OUTPUTS),
            "dtype": Arg("strings", choices=SOURCE_DTYPES),
            "ndim": Arg("ints", minimum=0, maximum=32),
            "layout": Arg("strings"),
            "parallel": Arg("bool", default=False),
            "no_copy": Arg("bool", default=False),
            "prefetch_queue_depth": Arg("int", default=1, minimum=1),
        },
        outputs_by=source_outputs,
    ),
    "decoders.image_slice": OpSchema(
        3,
        ("images",),
        {
            "output_type": Arg("enum", default="RGB", choices=("RGB", "BGR", "GRAY")),
            "normalized_anchor": Arg("bool", default=True),
            "normalized_shape": Arg("bool", default=True),
            "axis_names": Arg("enum", default="", choices=("", "WH", "HW", "W", "H")),
            "axes": Arg("ints", default=(1, 0), lengths=(1, 2), minimum=0, maximum=1),
            "out_of_bounds_policy": Arg("enum", default="error",
                                        choices=("error", "pad", "trim_to_shape")),
            "fill_values": Arg("floats"),
            **ON_ERROR_ARGS,
            **SEED_ARGS,
        },
    ),
}
