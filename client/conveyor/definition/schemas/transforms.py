"""The affine transform operators' schemas (part of ``schema.SCHEMAS``): DALI's
``fn.transforms``, with its argument names and defaults.

Each makes one matrix per sample: an affine transform of ``ndim`` dimensions as an
``(ndim, ndim + 1)`` float32 array (the last row of the homogeneous matrix left out), the
layout ``fn.warp_affine``'s ``matrix`` takes. Given a matrix as its input, an operator
composes its own transform with it: applied after the input's (``reverse_order=False``, the
default: ``M @ input``) or before it (``input @ M``).

The dimensions follow the arguments (``offset``'s length, ``scale``'s, ``axis`` given or not
for ``rotation``) or the input matrix. The vector arguments may be fed per sample by another
operator's output (``offset=fn.random.uniform(range=(-8, 8), shape=2)``), as the scalar
``angle``. ``combine`` multiplies two or more matrices: the first input's transform is
applied first unless ``reverse_order``.
"""

from __future__ import annotations

from conveyor.definition.schemas.args import Arg, OpSchema

#: The most dimensions a transform may have (DALI's limit).
MAX_TRANSFORM_DIMS = 6
#: The most matrices ``combine`` takes (DALI's limit).
MAX_COMBINED = 99

_ORDER = {"reverse_order": Arg("bool", default=False)}


def _vector(default: tuple[float, ...] | None = None, *, required: bool = False) -> Arg:
    """A vector, one value per dimension (or one for all where DALI broadcasts it): its
    length is checked against the transform's dimensions as each sample is made."""
    return Arg("floats", default=default, tensor=True, required=required)


def _transform(args: dict[str, Arg]) -> OpSchema:
    return OpSchema(0, ("output",), {**args, **_ORDER}, max_inputs=1)


TRANSFORM_SCHEMAS = {
    "transforms.translation": _transform({"offset": _vector(required=True)}),
    "transforms.scale": _transform({
        "scale": _vector(required=True),
        "center": _vector(),
        "ndim": Arg("int", minimum=1, maximum=MAX_TRANSFORM_DIMS),
    }),
    "transforms.rotation": _transform({
        "angle": Arg("float", tensor=True, required=True),
        "axis": _vector(),
        "center": _vector(),
    }),
    "transforms.shear": _transform({
        "shear": _vector(),
        "angles": _vector(),
        "center": _vector(),
    }),
    "transforms.crop": _transform({
        "from_start": _vector((0.0,)),
        "from_end": _vector((1.0,)),
        "to_start": _vector((0.0,)),
        "to_end": _vector((1.0,)),
        "absolute": Arg("bool", default=False),
    }),
    "transforms.combine": OpSchema(2, ("output",), dict(_ORDER), max_inputs=MAX_COMBINED),
}
