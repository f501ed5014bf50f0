"""Geometry operators' schemas beside those in ``schema.py``: ``warp_affine`` (part of
``schema.SCHEMAS``), with DALI's argument names and defaults."""

from __future__ import annotations

from conveyor.definition.schemas import output_sizes
from conveyor.definition.schemas.args import CPU_GPU, SEED_ARGS, Arg, OpSchema

#: DALI's warps interpolate with these (its CPU warp refuses the others).
WARP_INTERP = ("nn", "linear")
#: Output types of ``warp_affine`` ("": the input's type).
WARP_OUTPUTS = ("", "uint8", "uint16", "int16", "float32")

GEOMETRY_SCHEMAS = {
    "warp_affine": OpSchema(
        1,
        ("images",),
        {
            # The 2x3 matrix (M11, M12, M13, M21, M22, M23), [0, 0] the corner of the first
            # pixel: a constant, or per sample a float tensor of shape (2, 3), by name or
            # as the second positional input (``input_args``).
            "matrix": Arg("floats", lengths=(6,), tensor=True),
            # True: ``matrix`` maps output to input positions; False: input to output
            # (inverted before use).
            "inverse_map": Arg("bool", default=True),
            # (height, width); unset: the input's size.
            "size": Arg("floats", lengths=(2,), minimum=1, extent=True),
            # Unset: positions outside the input take the nearest border pixel.
            "fill_value": Arg("floats"),
            "interp_type": Arg("enum", default="linear", choices=WARP_INTERP),
            "dtype": Arg("enum", default="", choices=WARP_OUTPUTS),
            **SEED_ARGS,
        },
        devices=CPU_GPU,
        fixed_output=output_sizes.sized,
        input_args=("matrix",),
        doc="An affine warp of HWC images, as DALI's. `matrix` (M11, M12, M13, M21, M22, "
            "M23) maps each output position (x, y) to the input position (M11 x + M12 y + "
            "M13, M21 x + M22 y + M23), [0, 0] being the first pixel's corner (OpenCV's "
            "`warpAffine` with `WARP_INVERSE_MAP`); with `inverse_map=False` it maps input "
            "to output positions and is inverted first. It is a constant, or per sample a "
            "float tensor of shape (2, 3) (an operator's output, such as `fn.transforms.*`'s) "
            "given by name or as the second input. `size` is (height, width); `fill_value` "
            "(one value, or one per channel) fills positions outside the input, which "
            "otherwise take the nearest border pixel. Interpolation `nn` or `linear`.",
    ),
}
