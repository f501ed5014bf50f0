"""``transpose``, ``reshape``, ``cat`` and ``stack``, as DALI's operators of the same names.

Every output is a new, C-contiguous array of the input's type. Layouts are fixed when the
operator is built, from the inputs' layouts and the constant arguments (a shape fed per
sample leaves the layout empty unless ``layout`` names it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from conveyor.errors import InvalidArgument
from conveyor_server.engine.ops.args import Targs
from conveyor_server.engine.ops.probes.inputs import image
from conveyor_server.engine.ops.probes.probe_set import Case, op_probe
from conveyor_server.engine.ops.probes.probe_set import Targs as ProbeTargs
from conveyor_server.engine.ops.registry import OpContext, SampleOp, register


def _axis(op: str, name: str, axis: int, ndim: int, extra: int = 0) -> int:
    """``axis`` (negative from the end) as an index into ``ndim + extra`` positions."""
    top = ndim + extra
    if not -top <= axis < top:
        raise InvalidArgument(f"{op}: '{name}' is {axis}, outside [{-top}, {top - 1}] for "
                              f"inputs of {ndim} dimensions; give an axis in that range")
    return axis % top


# -- transpose ------------------------------------------------------------------------------


def _transpose_layout(ctx: OpContext) -> str:
    args, layout = ctx.args, (ctx.input_layouts or ("",))[0]
    if args["output_layout"] is not None:
        return str(args["output_layout"])
    if not args["transpose_layout"] or not layout:
        return layout
    perm = args["perm"]
    if perm is None:
        return layout[::-1]
    if sorted(perm) != list(range(len(layout))):
        raise InvalidArgument(f"transpose: 'perm' {list(perm)} is not a permutation of the "
                              f"{len(layout)} axes of the input layout {layout!r}")
    return "".join(layout[p] for p in perm)


@register("transpose")
def build_transpose(ctx: OpContext) -> SampleOp:
    perm = ctx.args["perm"]

    def run(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        data = inputs[0]
        order = tuple(range(data.ndim))[::-1] if perm is None else tuple(perm)
        if sorted(order) != list(range(data.ndim)):
            raise InvalidArgument(f"transpose: 'perm' {list(order)} is not a permutation of "
                                  f"the {data.ndim} axes of the input; list each of "
                                  f"0..{data.ndim - 1} once")
        return (np.ascontiguousarray(np.transpose(data, order)),)

    return SampleOp(fn=run, layouts=(_transpose_layout(ctx),))


# -- reshape -------------------------------------------------------------------------------


def _fill_wildcard(op: str, shape: list[int], volume: int, given: str) -> list[int]:
    """``shape`` with its negative extent (if any) set so its volume is ``volume``."""
    wild = [i for i, n in enumerate(shape) if n < 0]
    if len(wild) > 1:
        raise InvalidArgument(f"{op}: '{given}' {shape} has more than one negative extent; "
                              "only one may be left for the volume to decide")
    if wild:
        rest = math.prod(n for n in shape if n >= 0)
        if rest == 0 or volume % rest:
            raise InvalidArgument(f"{op}: '{given}' {shape} cannot hold {volume} values "
                                  "whatever its negative extent; give a shape that divides it")
        shape[wild[0]] = volume // rest
    return shape


def reshape_shape(op: str, in_shape: tuple[int, ...], shape: Sequence[int] | None,
                  rel_shape: Sequence[float] | None, src_dims: Sequence[int] | None
                  ) -> tuple[int, ...]:
    """The output shape of ``reshape`` for one sample, as DALI computes it."""
    volume = math.prod(in_shape)
    ndim = len(in_shape)
    if src_dims is not None:
        for d in src_dims:
            if not -1 <= d < ndim:
                raise InvalidArgument(f"{op}: 'src_dims' names dimension {d}, but the input "
                                      f"has {ndim}; give indices below {ndim}, or -1")
        base = [in_shape[d] if d >= 0 else 1 for d in src_dims]
    else:
        base = list(in_shape)
    if shape is not None:
        out = _fill_wildcard(op, [int(n) for n in shape], volume, "shape")
    elif rel_shape is not None:
        rel = [float(r) for r in rel_shape]
        if src_dims is not None and len(rel) != len(base):
            raise InvalidArgument(f"{op}: 'rel_shape' has {len(rel)} entries and 'src_dims' "
                                  f"{len(base)}; give one factor per kept dimension")
        extra = src_dims is None and len(rel) == ndim + 1 and rel[-1] < 0
        if src_dims is None and len(rel) > ndim and not extra:
            raise InvalidArgument(f"{op}: 'rel_shape' has {len(rel)} entries for an input of "
                                  f"{ndim} dimensions; give at most {ndim}")
        out = [-1 if r < 0 else round(base[i] * r) for i, r in enumerate(rel)]
        out = _fill_wildcard(op, out, volume, "rel_shape")
    else:
        out = base
    if math.prod(out) != volume or any(n < 0 for n in out):
        raise InvalidArgument(f"{op}: the output shape {out} holds {math.prod(out)} values, "
                              f"the input {list(in_shape)} holds {volume}; the volume must "
                              "stay the same")
    return tuple(out)


def _reshape_layout(ctx: OpContext) -> str:
    """``layout`` where given; else the input's when the output keeps its number of
    dimensions (known from the constant arguments), else none."""
    args, layout = ctx.args, (ctx.input_layouts or ("",))[0]
    if args["layout"] is not None:
        return str(args["layout"])
    if args["src_dims"] is not None:
        ndim = len(args["src_dims"])
    elif "shape" in ctx.tensor_args or "rel_shape" in ctx.tensor_args:
        return ""
    elif args["shape"] is not None or args["rel_shape"] is not None:
        ndim = len(args["shape"] if args["shape"] is not None else args["rel_shape"])
    else:
        ndim = len(layout)
    return layout if ndim == len(layout) else ""


def _fed_list(targs: Targs, name: str, constant: Sequence[float] | None,
              fed: bool) -> Sequence[float] | None:
    if not fed:
        return constant
    return [float(v) for v in np.asarray(targs[name]).reshape(-1)]


@register("reshape")
def build_reshape(ctx: OpContext) -> SampleOp:
    args, op = ctx.args, ctx.op_type
    shape_fed, rel_fed = "shape" in ctx.tensor_args, "rel_shape" in ctx.tensor_args
    if (args["shape"] is not None or shape_fed) and (args["rel_shape"] is not None or rel_fed):
        raise InvalidArgument(f"{op}: 'shape' and 'rel_shape' are both given; give one")

    def run(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        data = inputs[0]
        shape = _fed_list(targs, "shape", args["shape"], shape_fed)
        rel = _fed_list(targs, "rel_shape", args["rel_shape"], rel_fed)
        out = reshape_shape(op, data.shape, None if shape is None else [int(n) for n in shape],
                            rel, args["src_dims"])
        return (np.ascontiguousarray(data).reshape(out).copy(),)

    return SampleOp(fn=run, layouts=(_reshape_layout(ctx),))


# -- cat and stack -------------------------------------------------------------------------


def _one_layout(ctx: OpContext) -> str:
    given = {layout for layout in ctx.input_layouts if layout}
    if len(given) > 1:
        raise InvalidArgument(f"{ctx.op_type}: its inputs have the layouts {sorted(given)}; "
                              "give inputs of one layout")
    return given.pop() if given else ""


def _named_axis(ctx: OpContext, layout: str) -> int | None:
    name = ctx.args["axis_name"]
    if name is None:
        return None
    if ctx.op_type == "stack":
        return None
    if not layout or layout.count(name) != 1:
        raise InvalidArgument(f"cat: 'axis_name' {name!r} is not one letter of the inputs' "
                              f"layout {layout!r}; name an axis of it, or give 'axis'")
    return layout.index(name)


def _check_joined(op: str, inputs: Sequence[np.ndarray], same_shape: bool, axis: int) -> None:
    first = inputs[0]
    for i, other in enumerate(inputs[1:], start=1):
        if other.dtype != first.dtype:
            raise InvalidArgument(f"{op}: input {i} is {other.dtype}, input 0 {first.dtype}; "
                                  "give inputs of one type (fn.cast)")
        shapes = (first.shape, other.shape) if same_shape else (
            first.shape[:axis] + first.shape[axis + 1:], other.shape[:axis] +
            other.shape[axis + 1:]) if other.ndim == first.ndim else ((), (0,))
        if shapes[0] != shapes[1]:
            raise InvalidArgument(f"{op}: input {i} has the shape {other.shape}, input 0 "
                                  f"{first.shape}; they must match"
                                  f"{'' if same_shape else ' on every axis but the joined one'}")


@register("cat")
def build_cat(ctx: OpContext) -> SampleOp:
    layout = _one_layout(ctx)
    named = _named_axis(ctx, layout)

    def run(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        ndim = inputs[0].ndim
        axis = named if named is not None else _axis("cat", "axis", ctx.args["axis"], ndim)
        _check_joined("cat", inputs, False, axis)
        return (np.concatenate(inputs, axis=axis),)

    return SampleOp(fn=run, layouts=(layout,))


def _stack_layout(ctx: OpContext, layout: str) -> str:
    name = ctx.args["axis_name"]
    if name is None:
        return ""
    if len(name) != 1:
        raise InvalidArgument(f"stack: 'axis_name' {name!r} must be one letter")
    if not layout:
        return ""
    axis = _axis("stack", "axis", ctx.args["axis"], len(layout), extra=1)
    return layout[:axis] + name + layout[axis:]


@register("stack")
def build_stack(ctx: OpContext) -> SampleOp:
    layout = _stack_layout(ctx, _one_layout(ctx))

    def run(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        axis = _axis("stack", "axis", ctx.args["axis"], inputs[0].ndim, extra=1)
        _check_joined("stack", inputs, True, axis)
        return (np.stack(inputs, axis=axis),)

    return SampleOp(fn=run, layouts=(layout,))


# -- behaviour probes (engine/identity/behaviour/) ------------------------------------------


def _samples(*inputs: tuple[np.ndarray, ...]) -> list[tuple[Sequence[np.ndarray], ProbeTargs]]:
    return [(list(sample), {}) for sample in inputs]


@op_probe("transpose")
def _transpose(variant: str) -> list[Case]:
    pictures = _samples((image(5, 7, 3),), (image(4, 6, 1, "float32"),))
    return [Case({"perm": [2, 0, 1]}, pictures), Case({}, pictures),
            Case({"perm": [1, 0, 2], "transpose_layout": False}, pictures),
            Case({"perm": [0, 2, 1], "output_layout": "HCW"}, pictures)]


@op_probe("reshape")
def _reshape(variant: str) -> list[Case]:
    pictures = _samples((image(6, 4, 3),), (image(2, 8, 3, "int16"),))
    fed = [((image(6, 4, 3),), {"shape": np.array([3, -1], dtype=np.int32)}),
           ((image(2, 8, 3),), {"shape": np.array([12, 4], dtype=np.int32)})]
    return [Case({"shape": [-1, 3]}, pictures), Case({"rel_shape": [0.5, -1]}, pictures),
            Case({"src_dims": [-1, 1, 0, 2]}, pictures),
            Case({"src_dims": [2, -1, 0, 1], "rel_shape": [1.0, 1.0, 2.0, 0.5],
                  "layout": "CXHW"}, pictures),
            Case({}, fed)]


@op_probe("cat")
def _cat(variant: str) -> list[Case]:
    pairs = _samples((image(3, 4, 3), image(5, 4, 3, salt=1)),
                     (image(2, 2, 3), image(1, 2, 3, salt=2)))
    wide = _samples((image(3, 4, 3), image(3, 2, 3, salt=1), image(3, 1, 3, salt=2)))
    return [Case({}, pairs, input_layouts=("HWC", "HWC")),
            Case({"axis_name": "W"}, wide, input_layouts=("HWC", "HWC", "HWC")),
            Case({"axis": -1}, _samples((image(2, 3, 1), image(2, 3, 2, salt=3))),
                 input_layouts=("HWC", "HWC"))]


@op_probe("stack")
def _stack(variant: str) -> list[Case]:
    pairs = _samples((image(3, 4, 3), image(3, 4, 3, salt=1)),
                     (image(2, 5, 1), image(2, 5, 1, salt=2)))
    return [Case({}, pairs, input_layouts=("HWC", "HWC")),
            Case({"axis": 3, "axis_name": "F"}, pairs, input_layouts=("HWC", "HWC")),
            Case({"axis": -2}, pairs, input_layouts=("", ""))]
