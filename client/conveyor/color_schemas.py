"""The colour operators' schemas: ``brightness_contrast``, ``hsv`` and ``color_twist``
(part of ``schema.SCHEMAS``), with DALI's argument names and defaults."""

from __future__ import annotations

from conveyor.schema_args import CPU_GPU, SEED_ARGS, Arg, OpSchema

#: The output types of the colour operators ("": the input's type).
COLOR_DTYPES = ("", "uint8", "int16", "float16", "float32")


def _color(*names: str, dtype: str = "") -> dict[str, Arg]:
    """Per-sample colour arguments, each a number given once or per sample (DALI's
    defaults: 0 for hue and brightness_shift, 1 for the factors)."""
    zero = ("hue", "brightness_shift")
    args = {name: Arg("float", default=0.0 if name in zero else 1.0, tensor=True)
            for name in names}
    return {**args, "dtype": Arg("enum", default=dtype, choices=COLOR_DTYPES), **SEED_ARGS}


COLOR_SCHEMAS = {
    "brightness_contrast": OpSchema(
        1,
        ("images",),
        {**_color("brightness", "brightness_shift", "contrast"),
         # Unset: half the input type's range (128 for uint8, 0.5 for floats), as DALI.
         "contrast_center": Arg("float", tensor=True)},
        devices=CPU_GPU,
    ),
    "hsv": OpSchema(1, ("images",), _color("hue", "saturation", "value", dtype="uint8"),
                    devices=CPU_GPU),
    "color_twist": OpSchema(
        1, ("images",), _color("hue", "saturation", "value", "brightness", "contrast"),
        devices=CPU_GPU,
    ),
}
