"""The layout operators' schemas (part of ``schema.SCHEMAS``): ``transpose``, ``reshape``,
``cat``, ``stack`` and ``copy``, with DALI's argument names and defaults. They move values,
never change them: any input type, any number of dimensions."""

from __future__ import annotations

from conveyor.definition.schemas.args import CPU_GPU, SEED_ARGS, Arg, OpSchema

#: The most inputs ``cat`` and ``stack`` join.
MAX_JOINED = 64

LAYOUT_SCHEMAS = {
    "copy": OpSchema(
        1, ("output",), {**SEED_ARGS}, devices=CPU_GPU,
        doc="The input, copied. On `device=\"gpu\"` it is the transfer to the pipeline's "
            "GPU that DALI's `DataNode.gpu()` records (`images.gpu()` is "
            "`fn.copy(images, device=\"gpu\")`): the operators it feeds run on the GPU. It "
            "needs a CUDA device where the pipeline runs.",
    ),
    "transpose": OpSchema(
        1, ("output",),
        {"perm": Arg("ints", minimum=0),
         "transpose_layout": Arg("bool", default=True),
         "output_layout": Arg("str"), **SEED_ARGS},
        doc="Reorders the dimensions: output dimension `i` is input dimension `perm[i]` "
            "(unset: the dimensions reversed). The output's layout is `output_layout` "
            "where given, else the input's letters in the same order "
            "(`transpose_layout=True`) or the input's layout unchanged.",
    ),
    "reshape": OpSchema(
        1, ("output",),
        {"shape": Arg("ints", tensor=True),
         "rel_shape": Arg("floats", tensor=True),
         "src_dims": Arg("ints", minimum=-1),
         "layout": Arg("str"), **SEED_ARGS},
        input_args=("shape",),
        doc="The same values under another shape: `shape` (one extent may be negative: "
            "whatever the volume leaves), `rel_shape` (factors of the input's extents, "
            "rounded; one may be negative) or `src_dims` alone (input dimensions kept, in "
            "order, -1 a new dimension of extent 1; it also picks the extents `rel_shape` "
            "multiplies). The volume must stay the same. The layout is `layout` where "
            "given, else the input's when the number of dimensions stays, else none. "
            "`shape` may also be the second positional input.",
    ),
    "cat": OpSchema(
        1, ("output",),
        {"axis": Arg("int", default=0), "axis_name": Arg("str"), **SEED_ARGS},
        max_inputs=MAX_JOINED,
        doc="Joins its inputs along an existing axis (`axis`, negative from the end, or the "
            "letter `axis_name` of their layout); the inputs have one type and the same "
            "extents on every other axis.",
    ),
    "stack": OpSchema(
        1, ("output",),
        {"axis": Arg("int", default=0), "axis_name": Arg("str"), **SEED_ARGS},
        max_inputs=MAX_JOINED,
        doc="Joins its inputs along a new axis inserted at `axis` (0: whole samples "
            "stacked; the number of dimensions: values interleaved); `axis_name` is the "
            "new axis's letter in the output layout. The inputs have one type and shape.",
    ),
}
