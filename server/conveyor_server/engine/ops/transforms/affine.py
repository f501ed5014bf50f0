"""DALI's ``fn.transforms``: ``translation``, ``scale``, ``rotation``, ``shear``, ``crop``
and ``combine``, each making one affine matrix per sample.

A transform of ``ndim`` dimensions is its ``(ndim + 1)``-square homogeneous matrix; the
output leaves out the last row, ``(0, ..., 0, 1)``: an ``(ndim, ndim + 1)`` float32 array,
DALI's layout (``fn.warp_affine``'s ``matrix``). Every value is computed as DALI's CPU
operator computes it, in float32 one operation at a time (numpy's elementwise float32
operations round each result once, with no fused multiply-add), products of matrices summed
in DALI's order, from the first term; sines, cosines and tangents are the double-precision
C library's, rounded to float32 (DALI calls the float ones: a last-bit difference is
possible, docs/porting-from-dali.md). An input matrix is composed with the operator's own:
``M @ input`` (the input's transform first), or ``input @ M`` with ``reverse_order``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from conveyor.definition.schemas.transforms import MAX_TRANSFORM_DIMS
from conveyor.errors import InvalidArgument, SpecError
from conveyor_server.engine.ops.probes.probe_set import Case, f32, op_probe
from conveyor_server.engine.ops.registry import OpContext, SampleOp, register
from conveyor_server.engine.ops.transforms.matrices import (
    DEG2RAD,
    F32,
    around,
    matmul,
    rotation_2d,
    rotation_3d,
)

Targs = Mapping[str, np.ndarray]
#: Makes one sample's homogeneous matrix from its arguments; the input matrix's dimensions
#: (0 without an input) let an operator broadcast a single value.
Define = Callable[[Targs, int], np.ndarray]


# -- arguments -------------------------------------------------------------------------------


def vector_arg(ctx: OpContext, name: str) -> Callable[[Targs], np.ndarray | None]:
    """A getter for a vector argument, a constant or the sample's own values (float32)."""
    op = ctx.op_type
    if name in ctx.tensor_args:
        def per_sample(targs: Targs) -> np.ndarray:
            value = np.asarray(targs[name])
            if value.dtype.kind not in "fiu" or value.size == 0:
                raise InvalidArgument(f"{op}: argument '{name}' must be numbers, got an array "
                                      f"of type {value.dtype} and shape {value.shape}")
            values = value.astype(F32).ravel()
            if not np.all(np.isfinite(values)):
                raise InvalidArgument(f"{op}: argument '{name}' got {values.tolist()} for this "
                                      "sample: only finite numbers are allowed")
            return values
        return per_sample
    constant = ctx.args[name]
    fixed = None if constant is None else np.asarray(constant, dtype=F32).ravel()
    return lambda targs: fixed


def _given(ctx: OpContext, name: str) -> bool:
    return ctx.args.get(name) is not None or name in ctx.tensor_args


def _length(op: str, name: str, values: np.ndarray, ndim: int, broadcast: bool = False
            ) -> np.ndarray:
    if broadcast and values.size == 1:
        return np.full(ndim, values[0], dtype=F32)
    if values.size != ndim:
        raise InvalidArgument(f"{op}: argument '{name}' has {values.size} values, but the "
                              f"transform has {ndim} dimensions (give {ndim} values)")
    return values


def _dims(op: str, ndim: int, input_ndim: int) -> int:
    if input_ndim and input_ndim != ndim:
        raise InvalidArgument(f"{op}: the input matrix describes a {input_ndim}D transform but "
                              f"the arguments describe a {ndim}D one")
    if not 1 <= ndim <= MAX_TRANSFORM_DIMS:
        raise InvalidArgument(f"{op}: transforms of 1 to {MAX_TRANSFORM_DIMS} dimensions are "
                              f"supported, got {ndim}")
    return ndim


# -- the transforms --------------------------------------------------------------------------


def translation(ctx: OpContext) -> Define:
    offset_of = vector_arg(ctx, "offset")

    def define(targs: Targs, input_ndim: int) -> np.ndarray:
        offset = offset_of(targs)
        assert offset is not None
        n = _dims(ctx.op_type, offset.size, input_ndim)
        out = np.eye(n + 1, dtype=F32)
        out[:n, n] = offset
        return out

    return define


def scale(ctx: OpContext) -> Define:
    op = ctx.op_type
    scale_of, center_of = vector_arg(ctx, "scale"), vector_arg(ctx, "center")
    given_ndim = ctx.args["ndim"]

    def define(targs: Targs, input_ndim: int) -> np.ndarray:
        factors = scale_of(targs)
        assert factors is not None
        if factors.size > 1:
            n = factors.size
        else:  # one factor: for every dimension of ndim, else of the input
            n = given_ndim or input_ndim or 1
        n = _dims(op, n, input_ndim)
        factors = _length(op, "scale", factors, n, broadcast=True)
        out = np.eye(n + 1, dtype=F32)
        out[range(n), range(n)] = factors
        center = center_of(targs)
        if center is not None:
            out[:n, n] = _length(op, "center", center, n) * (F32(1) - factors)
        return out

    return define


def rotation(ctx: OpContext) -> Define:
    op = ctx.op_type
    angle_of, axis_of = vector_arg(ctx, "angle"), vector_arg(ctx, "axis")
    center_of = vector_arg(ctx, "center")
    three = _given(ctx, "axis")

    def define(targs: Targs, input_ndim: int) -> np.ndarray:
        angle = angle_of(targs)
        assert angle is not None
        if angle.size != 1:
            raise InvalidArgument(f"{op}: argument 'angle' must be one number per sample, got "
                                  f"{angle.size}")
        n = _dims(op, 3 if three else 2, input_ndim)
        if three:
            axis = axis_of(targs)
            assert axis is not None
            axis = _length(op, "axis", axis, 3)
            if not np.any(axis):
                raise InvalidArgument(f"{op}: argument 'axis' must have a non-zero length")
            linear = rotation_3d(axis, angle[0])
        else:
            linear = rotation_2d(angle[0])
        center = center_of(targs)
        if center is None:
            out = np.eye(n + 1, dtype=F32)
            out[:n, :n] = linear
            return out
        return around(linear, _length(op, "center", center, n))

    return define


def shear(ctx: OpContext) -> Define:
    op = ctx.op_type
    if _given(ctx, "shear") == _given(ctx, "angles"):
        raise SpecError(op, "shear", "give exactly one of 'shear' (the factors) and 'angles' "
                        "(in degrees)")
    by_angles = _given(ctx, "angles")
    values_of = vector_arg(ctx, "angles" if by_angles else "shear")
    center_of = vector_arg(ctx, "center")

    def define(targs: Targs, input_ndim: int) -> np.ndarray:
        values = values_of(targs)
        assert values is not None
        name = "angles" if by_angles else "shear"
        if values.size not in (2, 6):
            raise InvalidArgument(f"{op}: argument '{name}' has {values.size} values: give 2 "
                                  "(a 2D transform) or 6 (3D)")
        if by_angles:
            if np.any(np.abs(values) > 90):
                raise InvalidArgument(f"{op}: argument 'angles' got {values.tolist()}: each "
                                      "must be between -90 and 90 degrees")
            values = np.array([math.tan(float(F32(a) * DEG2RAD)) for a in values], dtype=F32)
        n = _dims(op, 2 if values.size == 2 else 3, input_ndim)
        linear = np.eye(n, dtype=F32)
        off_diagonal = [(i, j) for i in range(n) for j in range(n) if i != j]
        for (i, j), value in zip(off_diagonal, values, strict=True):
            linear[i, j] = value
        center = center_of(targs)
        if center is None:
            out = np.eye(n + 1, dtype=F32)
            out[:n, :n] = linear
            return out
        return around(linear, _length(op, "center", center, n))

    return define


def crop(ctx: OpContext) -> Define:
    op = ctx.op_type
    names = ("from_start", "from_end", "to_start", "to_end")
    getters = [vector_arg(ctx, name) for name in names]
    absolute = bool(ctx.args["absolute"])

    def define(targs: Targs, input_ndim: int) -> np.ndarray:
        values = [g(targs) for g in getters]
        n = _dims(op, max(v.size for v in values if v is not None), input_ndim)
        from_start, from_end, to_start, to_end = (
            _length(op, name, v, n, broadcast=True)
            for name, v in zip(names, values, strict=True) if v is not None)
        if absolute:
            from_start, from_end = np.minimum(from_start, from_end), np.maximum(from_start,
                                                                                from_end)
            to_start, to_end = np.minimum(to_start, to_end), np.maximum(to_start, to_end)
        with np.errstate(divide="ignore", invalid="ignore"):
            factor = (to_end - to_start) / (from_end - from_start)
        out = np.eye(n + 1, dtype=F32)
        out[range(n), range(n)] = factor
        out[:n, n] = to_start - factor * from_start
        return out

    return define


# -- the operators ---------------------------------------------------------------------------


def input_matrix(op: str, value: np.ndarray, position: str = "input") -> np.ndarray:
    """An input ``(ndim, ndim + 1)`` float32 matrix as its homogeneous square matrix."""
    matrix = np.asarray(value)
    if matrix.ndim != 2 or matrix.shape[1] != matrix.shape[0] + 1 or matrix.dtype != F32:
        raise InvalidArgument(f"{op}: the {position} must be an affine transform, a float32 "
                              f"array of shape (ndim, ndim + 1); got {matrix.dtype} of shape "
                              f"{matrix.shape}")
    n = matrix.shape[0]
    out = np.eye(n + 1, dtype=F32)
    out[:n] = matrix
    return out


def _builder(define_of: Callable[[OpContext], Define]) -> Callable[[OpContext], SampleOp]:
    def build(ctx: OpContext) -> SampleOp:
        define = define_of(ctx)
        op, reverse = ctx.op_type, bool(ctx.args["reverse_order"])

        def fn(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
            if not inputs:
                own = define(targs, 0)
                return (np.asarray(own[:-1]),)
            given = input_matrix(op, inputs[0])
            own = define(targs, given.shape[0] - 1)
            out = matmul(given, own) if reverse else matmul(own, given)
            return (np.asarray(out[:-1]),)

        return SampleOp(fn, layouts=("",))

    return build


for _name, _define in (("translation", translation), ("scale", scale),
                       ("rotation", rotation), ("shear", shear), ("crop", crop)):
    register(f"transforms.{_name}")(_builder(_define))


@register("transforms.combine")
def build_combine(ctx: OpContext) -> SampleOp:
    op, reverse = ctx.op_type, bool(ctx.args["reverse_order"])

    def fn(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        matrices = [input_matrix(op, m, f"input {i}") for i, m in enumerate(inputs)]
        if len({m.shape for m in matrices}) != 1:
            raise InvalidArgument(f"{op}: the input matrices must have one shape, got "
                                  f"{[(m.shape[0] - 1, m.shape[0]) for m in matrices]}")
        out = np.eye(matrices[0].shape[0], dtype=F32)
        for matrix in (matrices[::-1] if reverse else matrices):
            out = matmul(matrix, out)  # the first input's transform is applied first
        return (np.asarray(out[:-1]),)

    return SampleOp(fn, layouts=("",))


# -- probes ----------------------------------------------------------------------------------


def _matrix(rows: list[list[float]]) -> np.ndarray:
    return np.asarray(rows, dtype=F32)


#: Input matrices: a 2D one with inexact entries, and a 3D one.
_M2 = _matrix([[0.9, -0.3, 12.5], [0.41, 1.7, -3.3]])
_M3 = _matrix([[1.1, 0.2, -0.3, 4.0], [0.0, 0.7, 0.5, -2.5], [0.3, -0.1, 1.3, 0.125]])


def _with_inputs(args: dict[str, object], samples: list[dict[str, np.ndarray]],
                 matrix: np.ndarray) -> list[Case]:
    alone = Case(args, [([], targs) for targs in samples], input_layouts=())
    composed = [Case({**args, "reverse_order": rev}, [([matrix], targs) for targs in samples],
                     input_layouts=("",)) for rev in (False, True)]
    return [alone, *composed]


def _vec(*values: float) -> np.ndarray:
    return np.asarray(values, dtype=F32)


@op_probe("transforms.translation")
def _translation_probe(variant: str) -> list[Case]:
    fed = [{"offset": _vec(0.1, -7.3)}, {"offset": _vec(1e6, 3.3)}]
    return [*_with_inputs({"offset": [3.7, -1.1]}, [{}], _M2),
            *_with_inputs({}, fed, _M2),
            *_with_inputs({"offset": [0.5, 0.25, -2.0]}, [{}], _M3)]


@op_probe("transforms.scale")
def _scale_probe(variant: str) -> list[Case]:
    fed = [{"scale": _vec(1.3, 0.7), "center": _vec(10.1, -3.3)},
           {"scale": _vec(-2.0, 0.1), "center": _vec(0.3, 7.7)}]
    return [*_with_inputs({"scale": [1.5, 0.3], "center": [100.3, 20.7]}, [{}], _M2),
            *_with_inputs({}, fed, _M2),
            *_with_inputs({"scale": [0.7]}, [{}], _M2),
            *_with_inputs({"scale": [1.1], "ndim": 3, "center": [1.0, 2.0, 3.3]}, [{}], _M3)]


@op_probe("transforms.rotation")
def _rotation_probe(variant: str) -> list[Case]:
    angles = [{"angle": f32(a)} for a in (0.0, 30.0, -45.0, 90.0, 123.4, 180.0, 271.1)]
    centred = [{"angle": f32(a), "center": _vec(13.5, -2.25)} for a in (17.0, -99.9)]
    return [*_with_inputs({}, angles, _M2),
            *_with_inputs({"center": [100.5, 50.5]}, angles, _M2),
            *_with_inputs({}, centred, _M2),
            *_with_inputs({"axis": [1.0, 2.0, 3.0], "center": [1.0, -2.0, 0.5]}, angles, _M3),
            *_with_inputs({"axis": [0.0, 0.0, -2.0]}, angles, _M3)]


@op_probe("transforms.shear")
def _shear_probe(variant: str) -> list[Case]:
    fed = [{"angles": _vec(12.0, -33.3)}, {"angles": _vec(89.0, 0.5)}]
    return [*_with_inputs({"shear": [0.3, -0.7], "center": [5.5, 7.25]}, [{}], _M2),
            *_with_inputs({}, fed, _M2),
            *_with_inputs({"angles": [10.0, 20.0, -30.0, 40.0, 5.0, -6.0]}, [{}], _M3)]


@op_probe("transforms.crop")
def _crop_probe(variant: str) -> list[Case]:
    fed = [{"from_start": _vec(10.3, 20.1), "from_end": _vec(110.7, 3.3)}]
    return [*_with_inputs({"from_start": [10.0, 20.0], "from_end": [110.0, 220.0],
                           "to_start": [-1.0], "to_end": [1.0]}, [{}], _M2),
            *_with_inputs({"absolute": True}, fed, _M2),
            *_with_inputs({"to_end": [3.3, 0.7, 9.1]}, [{}], _M3)]


@op_probe("transforms.combine")
def _combine_probe(variant: str) -> list[Case]:
    other = _matrix([[0.5, 0.125, -1.3], [2.2, -0.9, 0.7]])
    third = _matrix([[1.0, 0.3, 0.0], [-0.3, 1.0, 100.1]])
    return [Case({"reverse_order": rev}, [([_M2, other], {}), ([other, third, _M2], {})],
                 input_layouts=("", "", ""))
            for rev in (False, True)]
