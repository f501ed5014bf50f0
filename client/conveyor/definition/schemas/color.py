"""The colour operators' schemas: ``brightness_contrast``, ``brightness``, ``contrast``,
``hsv``, ``hue``, ``color_twist``, ``saturation`` and ``equalize`` (part of
``schema.SCHEMAS``), with DALI's argument names and defaults."""

from __future__ import annotations

from conveyor.definition.schemas.args import CPU_GPU, SEED_ARGS, Arg, OpSchema

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
    "brightness": OpSchema(
        1, ("images",), _color("brightness", "brightness_shift"), devices=CPU_GPU,
        doc="Scales each value by `brightness` and adds `brightness_shift` times the output "
            "type's range (1 for floats, 255 for uint8), in float, rounded to the output "
            "type (`dtype`, unset: the input's): `brightness_contrast` with `contrast` 1.",
    ),
    "contrast": OpSchema(
        1, ("images",),
        {**_color("contrast"),
         # Unset: half the input type's range (128 for uint8, 0.5 for floats), as DALI.
         "contrast_center": Arg("float", tensor=True)},
        devices=CPU_GPU,
        doc="Stretches values away from `contrast_center` (unset: half the input type's "
            "range, 128 for uint8, 0.5 for floats) by `contrast`: `(v - center) * contrast + "
            "center`, in float, rounded to the output type: `brightness_contrast` with "
            "`brightness` 1.",
    ),
    "hue": OpSchema(
        1, ("images",), {**_color("hue"), "image_type": Arg("enum", default="RGB",
                                                            choices=("RGB",))},
        devices=CPU_GPU,
        doc="Turns the hue of RGB images by `hue` degrees: the pixel goes to YIQ, its (I, Q) "
            "plane turns, and it comes back to RGB, in float, rounded to the output type "
            "(`dtype`, unset: the input's); as `fn.saturation`, the way back is the exact "
            "inverse of the RGB-to-YIQ matrix (DALI 2.4's).",
    ),
    "hsv": OpSchema(1, ("images",), _color("hue", "saturation", "value", dtype="uint8"),
                    devices=CPU_GPU),
    "color_twist": OpSchema(
        1, ("images",), _color("hue", "saturation", "value", "brightness", "contrast"),
        devices=CPU_GPU,
    ),
    "saturation": OpSchema(
        1, ("images",),
        {**_color("saturation"), "saturation": Arg("float", default=1.0, tensor=True, minimum=0)},
        devices=CPU_GPU,
        doc="Scales the saturation of RGB images: 0 is grey, 1 no change. DALI's math: "
            "the pixel goes to YIQ, its I and Q are scaled, and it comes back to RGB, in "
            "float, rounded to the output type (`dtype`, unset: the input's); the same "
            "matrix as `fn.hsv` with only `saturation` given.",
    ),
    "equalize": OpSchema(
        1, ("images",), dict(SEED_ARGS), aliases=("experimental.equalize",),
        doc="Histogram equalization of each channel of a uint8 HWC image, as DALI's: a "
            "channel's values map through its cumulative histogram, stretched so that the "
            "first value present becomes 0 and the rest spread up to 255; a channel of one "
            "value is left as it is.",
    ),
}
