"""Operator schemas: each operator's one declaration (its arguments with their kinds,
defaults, limits and flags, its devices, its output-size rule: ``schema_args``).

``fn`` makes every operator of ``SCHEMAS`` from it; a server validates and bounds specs by
it and registers builders, GPU planners and probes against it; the operator reference is
generated from it (``SCHEMAS`` and ``schema_of`` are the public way to read it).
``decode_args`` turns an ``OpSpec``'s arguments back into Python values, defaults filled in.
Schemas also live in the ``*_schemas`` modules beside this one: readers, colour, geometry
(``warp_affine``), layout, expressions, sources, ``reductions.*`` and ``transforms.*``.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Any

from conveyor.definition.schemas import args as schema_args
from conveyor.definition.schemas import output_sizes
from conveyor.definition.schemas.arithmetic import MATH_SCHEMAS
from conveyor.definition.schemas.color import COLOR_SCHEMAS
from conveyor.definition.schemas.geometry import GEOMETRY_SCHEMAS
from conveyor.definition.schemas.layout import LAYOUT_SCHEMAS
from conveyor.definition.schemas.readers import READER_ORDER, READER_SCHEMAS
from conveyor.definition.schemas.reductions import REDUCTION_SCHEMAS
from conveyor.definition.schemas.sources import SOURCE_SCHEMAS
from conveyor.definition.schemas.transforms import TRANSFORM_SCHEMAS
from conveyor.definition.unsupported import not_supported, unknown_operator
from conveyor.errors import SpecError
from conveyor.v1 import pipeline_pb2

DTYPES = ("uint8", "int8", "uint16", "int16", "int32", "int64", "float16", "float32", "float64",
          "bool")
IMAGE_TYPES = ("RGB", "BGR", "GRAY")
INTERP_TYPES = ("nn", "linear", "cubic", "lanczos3")
DEVICES = ("cpu", "mixed", "gpu")
DECODER_DEVICES = ("cpu", "mixed")  # the window decoders: CPU or, as DALI's, "mixed"
# Defined in schema_args; named here too, where they have always been.
Arg = schema_args.Arg
OpSchema = schema_args.OpSchema
CPU_GPU, ON_ERROR = schema_args.CPU_GPU, schema_args.ON_ERROR
_SEED, _ON_ERROR = schema_args.SEED_ARGS, schema_args.ON_ERROR_ARGS
_CROP = {
    "crop": Arg("floats", lengths=(2,), minimum=1, extent=True),
    "crop_h": Arg("float", default=0.0, minimum=0, extent=True),
    "crop_w": Arg("float", default=0.0, minimum=0, extent=True),
    "crop_pos_x": Arg("float", default=0.5, tensor=True, minimum=0, maximum=1),
    "crop_pos_y": Arg("float", default=0.5, tensor=True, minimum=0, maximum=1),
}
#: The random window of random_resized_crop and decoders.image_random_crop.
_WINDOW = {
    "random_area": Arg("floats", default=(0.08, 1.0), lengths=(1, 2), minimum=0, maximum=1),
    "random_aspect_ratio": Arg("floats", default=(3 / 4, 4 / 3), lengths=(1, 2), minimum=0),
    "num_attempts": Arg("int", default=10, minimum=1, maximum=1000),
}
#: The share of a batch's JPEGs a GPU's hardware decoder takes (DALI's; CPU: ignored), and
#: DALI's hints of the largest image for its hardware decoder's buffers (an int >= 0, as
#: DALI's): the GPU decoders allocate for a batch of that size once (CPU: ignored).
_DECODER_HINTS = {"hw_decoder_load": Arg("float", default=0.65, minimum=0, maximum=1),
            "preallocate_width_hint": Arg("int", default=0, minimum=0),
            "preallocate_height_hint": Arg("int", default=0, minimum=0)}
SCHEMAS: dict[str, OpSchema] = {
    "readers.file": OpSchema(
        0,
        ("data", "label"),
        {
            "file_root": Arg("str", default="", path=True),
            "file_list": Arg("str", default="", path=True),
            "files": Arg("strings", path=True, unbounded=True),
            "labels": Arg("ints", unbounded=True),
            "file_filters": Arg("strings"),
            "case_sensitive_filter": Arg("bool", default=False),
            **READER_ORDER,
            **_ON_ERROR,
            **_SEED,
        },
    ),
    **READER_SCHEMAS,
    "decoders.image": OpSchema(
        1,
        ("images",),
        {"output_type": Arg("enum", default="RGB", choices=IMAGE_TYPES), **_DECODER_HINTS,
         **_ON_ERROR, **_SEED},
        devices=DEVICES,
    ),
    "decoders.image_random_crop": OpSchema(
        1,
        ("images",),
        {"output_type": Arg("enum", default="RGB", choices=IMAGE_TYPES), **_WINDOW,
         **_DECODER_HINTS, **_ON_ERROR, **_SEED},
        devices=DECODER_DEVICES,
    ),
    "decoders.image_crop": OpSchema(
        1,
        ("images",),
        {"output_type": Arg("enum", default="RGB", choices=IMAGE_TYPES), **_CROP, **_DECODER_HINTS,
         **_ON_ERROR, **_SEED},
        devices=DECODER_DEVICES,
        fixed_output=output_sizes.crop_window,
    ),
    "random.uniform": OpSchema(
        0,
        ("values",),
        {
            "range": Arg("floats", default=(-1.0, 1.0), lengths=(2,)),
            "values": Arg("floats"),
            "shape": Arg("ints", default=(), minimum=0),
            "dtype": Arg("enum", default="float32", choices=("float32", "float64")),
            **_SEED,
        },
        fixed_output=output_sizes.random_draw,
    ),
    "random.normal": OpSchema(
        0,
        ("values",),
        {
            "mean": Arg("float", default=0.0),
            "stddev": Arg("float", default=1.0, minimum=0),
            "shape": Arg("ints", default=(), minimum=0),
            "dtype": Arg("enum", default="float32", choices=("float32", "float64")),
            **_SEED,
        },
        fixed_output=output_sizes.random_draw,
    ),
    "random.coin_flip": OpSchema(
        0,
        ("values",),
        {
            "probability": Arg("float", default=0.5, minimum=0, maximum=1),
            "shape": Arg("ints", default=(), minimum=0),
            "dtype": Arg("enum", default="int32", choices=("int32", "uint8", "bool")),
            **_SEED,
        },
        fixed_output=output_sizes.random_draw,
    ),
    "rotate": OpSchema(
        1,
        ("images",),
        {
            "angle": Arg("float", tensor=True, required=True),
            "fill_value": Arg("floats"),
            "keep_size": Arg("bool", default=False),
            "size": Arg("floats", lengths=(2,), minimum=1, extent=True),
            "interp_type": Arg("enum", default="linear", choices=INTERP_TYPES),
            **_SEED,
        },
        devices=CPU_GPU,
        fixed_output=output_sizes.sized,
    ),
    "resize": OpSchema(
        1,
        ("images",),
        {
            "resize_x": Arg("float", default=0.0, tensor=True, minimum=0, extent=True),
            "resize_y": Arg("float", default=0.0, tensor=True, minimum=0, extent=True),
            "resize_shorter": Arg("float", default=0.0, minimum=0, extent=True),
            "resize_longer": Arg("float", default=0.0, minimum=0, extent=True),
            "size": Arg("floats", lengths=(1, 2), minimum=0, extent=True),
            "mode": Arg(
                "enum",
                default="default",
                choices=("default", "stretch", "not_smaller", "not_larger"),
            ),
            "max_size": Arg("floats", lengths=(1, 2), minimum=0, extent=True),
            "interp_type": Arg("enum", default="linear", choices=INTERP_TYPES),
            "antialias": Arg("bool", default=True),
            "dtype": Arg("enum", default="", choices=("", "uint8", "float32")),
            **_SEED,
        },
        devices=CPU_GPU,
        fixed_output=output_sizes.resize,
    ),
    "random_resized_crop": OpSchema(
        1,
        ("images",),
        {
            "size": Arg("floats", required=True, lengths=(1, 2), minimum=1, extent=True),
            **_WINDOW,
            "interp_type": Arg("enum", default="linear", choices=INTERP_TYPES),
            "antialias": Arg("bool", default=True),
            **_SEED,
        },
        devices=CPU_GPU,
        fixed_output=output_sizes.sized,
    ),
    **GEOMETRY_SCHEMAS,
    **COLOR_SCHEMAS,
    **SOURCE_SCHEMAS,
    **MATH_SCHEMAS,
    **REDUCTION_SCHEMAS, **TRANSFORM_SCHEMAS, **LAYOUT_SCHEMAS,
    "crop": OpSchema(
        1,
        ("images",),
        {**_CROP, "fill_values": Arg("floats"), "out_of_bounds_policy": Arg(
            "enum", default="error", choices=("error", "pad", "trim_to_shape")
        ), **_SEED},
        devices=CPU_GPU,
        fixed_output=output_sizes.crop_window,
    ),
    "flip": OpSchema(
        1,
        ("images",),
        {
            "horizontal": Arg("int", default=1, tensor=True, minimum=0, maximum=1),
            "vertical": Arg("int", default=0, tensor=True, minimum=0, maximum=1),
            **_SEED,
        },
        devices=CPU_GPU,
    ),
    "crop_mirror_normalize": OpSchema(
        1,
        ("images",),
        {
            **_CROP,
            "mean": Arg("floats", default=(0.0,)),
            "std": Arg("floats", default=(1.0,)),
            "mirror": Arg("int", default=0, tensor=True, minimum=0, maximum=1),
            "dtype": Arg("enum", default="float32",
                         choices=("float32", "float16", "uint8", "int8")),
            "output_layout": Arg("enum", default="CHW", choices=("CHW", "HWC")),
            "scale": Arg("float", default=1.0),
            "shift": Arg("float", default=0.0),
            "pad_output": Arg("bool", default=False),
            **_SEED,
        },
        devices=CPU_GPU,
        fixed_output=output_sizes.crop_window,
    ),
    "cast": OpSchema(
        1, ("output",), {"dtype": Arg("enum", required=True, choices=DTYPES), **_SEED},
        devices=CPU_GPU,
    ),
}


def schema_of(op_type: str) -> OpSchema:
    try:
        return SCHEMAS[op_type]
    except KeyError:
        raise unknown_operator(op_type, SCHEMAS) from None


def num_outputs(op: pipeline_pb2.OpSpec) -> int:
    """How many outputs a configured operator has: fixed by its schema, one per entry of
    its ``outputs_from`` argument, or as its ``outputs_by`` says from its arguments."""
    schema = schema_of(op.type)
    if schema.outputs_by is not None:
        given = {name: decode_value(op.args[name]) if name in op.args else arg.default
                 for name, arg in schema.args.items()}
        return len(schema.outputs_by(given))
    if schema.outputs_from and schema.outputs_from in op.args:
        value = decode_value(op.args[schema.outputs_from])
        if isinstance(value, tuple):  # anything else is refused with the arguments
            return len(value)
    return len(schema.outputs)


def _allowed(arg: Arg) -> str:
    if arg.kind == "enum":
        return "one of " + ", ".join(repr(c) for c in arg.choices)
    if arg.kind == "strings" and arg.choices:
        return "a list of strings, each one of " + ", ".join(repr(c) for c in arg.choices)
    text = {"int": "an int", "float": "a number", "bool": "a bool", "str": "a string",
            "ints": "a list of ints", "floats": "a list of numbers",
            "strings": "a list of strings"}[arg.kind]
    if arg.lengths:
        text += " of length " + " or ".join(str(n) for n in arg.lengths)
    if arg.minimum is not None:
        text += f", each >= {arg.minimum:g}" if arg.kind in ("ints", "floats") else \
            f" >= {arg.minimum:g}"
    if arg.maximum is not None:
        text += f" <= {arg.maximum:g}"
    return text


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def encode_arg(op: str, name: str, value: Any) -> pipeline_pb2.Argument:
    """Validate one constant Python value against the schema and encode it."""
    schema = schema_of(op)
    if name not in schema.args:
        raise not_supported(f"fn.{op}'s argument", name, schema.args, op=op, argument=name,
                            spell="{!r}")
    arg = schema.args[name]
    if isinstance(value, Enum):
        value = value.value
    if hasattr(value, "tolist") and not isinstance(value, str):  # numpy scalars and arrays
        value = value.tolist()
    bad = SpecError(op, name, f"got {value!r}, expected {_allowed(arg)}")
    out = pipeline_pb2.Argument()
    kind = arg.kind
    if kind == "int":
        if not isinstance(value, int):
            raise bad
        value = int(value)  # a bool is 0 or 1, as DALI takes it (mirror=False)
        _check_range(arg, [value], bad)
        out.i = value
    elif kind == "float":
        if not _is_number(value):
            raise bad
        _check_finite(op, name, [value])
        _check_range(arg, [value], bad)
        out.f = float(value)
    elif kind == "bool":
        if not isinstance(value, bool):
            raise bad
        out.b = value
    elif kind in ("str", "enum"):
        if not isinstance(value, str) or (kind == "enum" and value not in arg.choices):
            raise bad
        _check_text(op, name, [value])
        out.s = value
    elif kind in ("ints", "floats", "strings"):
        if _is_number(value) and kind != "strings" and (kind == "floats" or isinstance(value, int)):
            value = [value]  # one number where a list is expected, as DALI takes it (axes=0)
        if kind == "strings" and isinstance(value, str):  # one string, as DALI takes it
            value = [value]
        if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
            raise bad
        items = list(value)
        if kind == "floats" and items and all(isinstance(v, list | tuple) for v in items):
            items = [v for row in items for v in row]  # a matrix, row by row
        if arg.lengths and len(items) not in arg.lengths:
            raise bad
        if kind == "ints":
            if not all(isinstance(v, int) for v in items):
                raise bad
            items = [int(v) for v in items]  # bools as 0 and 1
            _check_range(arg, items, bad)
            out.ints.values.extend(items)
        elif kind == "floats":
            if not all(_is_number(v) for v in items):
                raise bad
            _check_finite(op, name, items)
            _check_range(arg, items, bad)
            out.floats.values.extend(float(v) for v in items)
        else:
            if not all(isinstance(v, str) for v in items):
                raise bad
            _check_text(op, name, items)
            if arg.choices and not all(v in arg.choices for v in items):
                raise bad
            out.strings.values.extend(str(v) for v in items)
    else:  # pragma: no cover - schema bug
        raise AssertionError(kind)
    return out


def _check_finite(op: str, name: str, values: list[Any]) -> None:
    """NaN and infinities pass every range check and break every size: refused."""
    for v in values:
        if not math.isfinite(v):
            raise SpecError(op, name, f"got {v!r}: only finite numbers are allowed")


def _check_text(op: str, name: str, values: list[str]) -> None:
    """Strings are paths, patterns or choices: a NUL character is never part of one."""
    for v in values:
        if "\0" in v:
            raise SpecError(op, name, f"contains a NUL character (at index {v.index(chr(0))})")


def _check_range(arg: Arg, values: list[Any], bad: SpecError) -> None:
    for v in values:
        if arg.minimum is not None and v < arg.minimum:
            raise bad
        if arg.maximum is not None and v > arg.maximum:
            raise bad


def decode_value(argument: pipeline_pb2.Argument) -> Any:
    which = argument.WhichOneof("value")
    if which is None:
        return None
    value = getattr(argument, which)
    if which in ("ints", "floats", "strings"):
        return tuple(value.values)
    return value


def decode_args(op: pipeline_pb2.OpSpec) -> dict[str, Any]:
    """The op's constant arguments with defaults filled in, re-validated against the schema."""
    schema = schema_of(op.type)
    values: dict[str, Any] = {}
    for name, arg in schema.args.items():
        if name in op.args:
            value = decode_value(op.args[name])
            encode_arg(op.type, name, list(value) if isinstance(value, tuple) else value)
            if arg.kind == "floats" and not isinstance(value, tuple):
                value = (value,)  # one number where a list is expected, as encode_arg takes it
            values[name] = value
        elif name in op.arg_inputs:
            if not arg.tensor:
                raise SpecError(op.type, name, "cannot be fed by another operator's output")
            values[name] = None
        elif arg.required:
            raise SpecError(op.type, name, f"is required ({_allowed(arg)})")
        else:
            values[name] = arg.default
    for name in op.args:
        if name not in schema.args:
            encode_arg(op.type, name, None)  # raises: unknown argument
    for name in op.arg_inputs:
        if name not in schema.args:
            encode_arg(op.type, name, None)
        if name in op.args:
            raise SpecError(op.type, name, "given both as a constant and as an operator output")
    return values
