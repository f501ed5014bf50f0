"""DALI's ``fn.reductions``: ``min``, ``max``, ``sum``, ``mean``, ``mean_square``, ``rms``,
``std_dev`` and ``variance``, each over some axes of every sample on its own.

Each follows DALI's CPU operator step by step, in the output type (``dtype``, which is also
the accumulation type): the preprocessing of each value (itself, its square, its squared
distance from the mean: in C's types, so the square of a 16-bit integer is a C ``int``), the
accumulation in DALI's order (``tree.py``), and the final step in float32 (``x * (1 / n)``
with ``1 / n`` rounded to float32, then the square root for ``rms`` and ``std_dev``),
converted to an integer output by truncation, as C converts. Integer sums wrap around in
their type, as C's do; minima and maxima start from the type's largest (smallest) value, so
a float minimum over values that are all NaN or +inf is float32's largest finite value, as
DALI's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from conveyor.definition.schemas.reductions import REDUCTION_INPUTS, REDUCTION_TYPES, WITH_MEAN
from conveyor.errors import InvalidArgument, SpecError
from conveyor_server.engine.ops.probes.inputs import image
from conveyor_server.engine.ops.probes.probe_set import Case, op_probe
from conveyor_server.engine.ops.reductions import tree
from conveyor_server.engine.ops.registry import OpContext, SampleOp, register

F32 = np.dtype(np.float32)
KINDS = tuple(REDUCTION_TYPES)
#: The kinds whose result is divided by the number of values reduced.
_AVERAGED = ("mean", "mean_square", "rms", "std_dev", "variance")
_ROOTED = ("rms", "std_dev")
_SQUARED = ("mean_square", "rms")
#: C's ``int``: what the product of two 8- or 16-bit integers is computed in.
_C_INT = {np.dtype(t) for t in ("uint8", "int8", "uint16", "int16")}


# -- axes ----------------------------------------------------------------------------------


def sample_axes(op: str, ndim: int, axes: Sequence[int] | None) -> tuple[int, ...]:
    """The sample's reduced axes, sorted, from ``axes`` (None: all of them)."""
    if axes is None:
        return tuple(range(ndim))
    found: list[int] = []
    for axis in axes:
        if not -ndim <= axis < ndim:
            raise InvalidArgument(f"{op}: argument 'axes' names axis {axis}, but the sample has "
                                  f"{ndim} axes (allowed: {-ndim} to {ndim - 1})")
        axis %= ndim
        if axis in found:
            raise InvalidArgument(f"{op}: argument 'axes' names axis {axis} twice")
        found.append(axis)
    return tuple(sorted(found))


def named_axes(ctx: OpContext) -> tuple[int, ...] | None:
    """``axes`` or ``axis_names`` as axis indices (None: every axis); names are read from
    the input's layout when the pipeline is built."""
    op, args = ctx.op_type, ctx.args
    if args["axes"] is not None and args["axis_names"] is not None:
        raise SpecError(op, "axis_names", "cannot be combined with 'axes': give one of them")
    if args["axis_names"] is None:
        return None if args["axes"] is None else tuple(args["axes"])
    layout = ctx.input_layouts[0] if ctx.input_layouts else ""
    if not layout:
        raise SpecError(op, "axis_names", "needs the input's layout, which is not known here "
                        "(give 'axes', the axis indices, instead)")
    axes = []
    for name in args["axis_names"]:
        if name not in layout:
            raise SpecError(op, "axis_names", f"names axis {name!r}, which the input's layout "
                            f"{layout!r} does not have")
        axes.append(layout.index(name))
    return tuple(axes)


def reduced_shape(shape: Sequence[int], axes: Sequence[int], keep_dims: bool) -> tuple[int, ...]:
    if keep_dims:
        return tuple(1 if i in axes else n for i, n in enumerate(shape))
    return tuple(n for i, n in enumerate(shape) if i not in axes)


# -- the steps -----------------------------------------------------------------------------


def out_type(op: str, kind: str, dtype: str, given: np.dtype) -> np.dtype:
    """The output type for an input of type ``given``; ``InvalidArgument`` for a pair DALI
    does not take."""
    allowed = REDUCTION_TYPES[kind].get(given.name)
    if allowed is None:
        raise InvalidArgument(f"{op}: inputs of type {given} are not supported (supported: "
                              f"{', '.join(REDUCTION_INPUTS)})")
    if dtype and dtype not in allowed:
        raise InvalidArgument(f"{op}: argument 'dtype' got {dtype!r} for an input of type "
                              f"{given} (allowed: {', '.join(allowed)})")
    return np.dtype(dtype or allowed[0])


def squared(x: np.ndarray) -> np.ndarray:
    """``x * x`` in C's types: ``int`` for 8- and 16-bit integers (wrapping where C's
    overflow does), 64 bits for 32-bit integers, the type itself otherwise."""
    if x.dtype in _C_INT:
        wide = x.astype(np.int64)
        return (wide * wide).astype(np.int32)
    if x.dtype == np.int32:
        return x.astype(np.int64) * x.astype(np.int64)
    if x.dtype == np.uint32:
        return x.astype(np.uint64) * x.astype(np.uint64)
    with np.errstate(over="ignore"):
        return x * x


def norm_factor(count: int) -> np.float32:
    """DALI's ``1 / n`` in double, rounded to float32 (infinite for n = 0)."""
    if count == 0:
        return np.float32(np.inf)
    return np.float32(1.0 / count)


def accumulate(kind: str, values: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """``values`` (in the output type) reduced over ``axes``: DALI's order for floats, any
    order for integers (their sums wrap, their minima are exact)."""
    dtype = values.dtype
    out_shape = reduced_shape(values.shape, axes, keep_dims=False)
    is_float = dtype.kind == "f"
    limits = np.finfo(dtype) if is_float else np.iinfo(dtype)
    if kind == "min":
        combine, neutral = tree.smaller, limits.max
    elif kind == "max":
        combine, neutral = tree.larger, limits.min
    else:
        combine, neutral = tree.add, 0
    if 0 in values.shape:
        return np.full(out_shape, neutral, dtype=dtype)
    if is_float:
        return tree.tree_reduce(values, axes, combine, neutral).reshape(out_shape)
    with np.errstate(over="ignore"):
        if kind == "min":
            return np.asarray(values.min(axis=axes))
        if kind == "max":
            return np.asarray(values.max(axis=axes))
        return np.asarray(values.sum(axis=axes, dtype=dtype))


def finish(kind: str, reduced: np.ndarray, count: int) -> np.ndarray:
    """The final step: ``x * (1 / n)`` in float32 (then the square root), converted to the
    output type by truncation."""
    if kind not in _AVERAGED:
        return reduced
    with np.errstate(invalid="ignore", over="ignore"):
        result = reduced.astype(F32) * norm_factor(count)
        if kind in _ROOTED:
            result = np.sqrt(result)
    if reduced.dtype.kind == "f":
        return result
    with np.errstate(invalid="ignore"):
        return result.astype(reduced.dtype)


def mean_for(op: str, mean: np.ndarray, shape: Sequence[int], axes: tuple[int, ...]
             ) -> np.ndarray:
    """The mean input in the shape that broadcasts against the sample (reduced axes kept)."""
    kept = reduced_shape(shape, axes, keep_dims=True)
    if mean.dtype != F32:
        raise InvalidArgument(f"{op}: the mean (input 1) must be float32, as "
                              f"fn.reductions.mean gives it; got {mean.dtype}")
    if mean.shape not in (kept, reduced_shape(shape, axes, keep_dims=False)):
        raise InvalidArgument(f"{op}: the mean (input 1) has shape {mean.shape}; for a sample "
                              f"of shape {tuple(shape)} reduced over axes {list(axes)} it must "
                              f"be {reduced_shape(shape, axes, keep_dims=False)} or {kept}")
    return mean.reshape(kept)


def reduce_sample(op: str, kind: str, x: np.ndarray, axes: Sequence[int] | None,
                  keep_dims: bool, dtype: str = "", mean: np.ndarray | None = None,
                  ddof: int = 0) -> np.ndarray:
    """One sample reduced, as DALI's CPU operator ``kind`` reduces it."""
    out_dtype = out_type(op, kind, dtype, x.dtype)
    reduced_axes = sample_axes(op, x.ndim, axes)
    out_shape = reduced_shape(x.shape, reduced_axes, keep_dims)
    if kind in WITH_MEAN:
        assert mean is not None
        centred = mean_for(op, mean, x.shape, reduced_axes)
        if not reduced_axes:  # DALI's operator gives zeros for axes=[]
            return np.zeros(out_shape, dtype=out_dtype)
        with np.errstate(over="ignore", invalid="ignore"):
            d = x.astype(F32) - centred
            values = d * d
    elif kind in _SQUARED:
        values = squared(x)
    else:
        values = x
    with np.errstate(over="ignore", invalid="ignore"):
        values = values.astype(out_dtype)
    count = int(np.prod([x.shape[a] for a in reduced_axes], dtype=np.int64)) - ddof
    reduced = accumulate(kind, values, reduced_axes) if reduced_axes else values
    return np.asarray(finish(kind, reduced, count).reshape(out_shape), order="C")


def _builder(kind: str) -> Callable[[OpContext], SampleOp]:
    def build(ctx: OpContext) -> SampleOp:
        op, args = ctx.op_type, ctx.args
        if args["reduce_batch"]:
            raise SpecError(op, "reduce_batch", "is not supported: every sample is reduced on "
                            "its own, as DALI's CPU reductions do (reduce each sample, then "
                            "combine the per-sample results in the training step)")
        axes = named_axes(ctx)
        keep_dims = bool(args["keep_dims"])
        dtype = str(args.get("dtype") or "")
        ddof = int(args.get("ddof") or 0)

        def fn(inputs: Sequence[np.ndarray], targs: object) -> tuple[np.ndarray, ...]:
            x = np.asarray(inputs[0])
            mean = np.asarray(inputs[1]) if kind in WITH_MEAN else None
            return (reduce_sample(op, kind, x, axes, keep_dims, dtype, mean, ddof),)

        return SampleOp(fn, layouts=("",))

    return build


for _kind in KINDS:
    register(f"reductions.{_kind}")(_builder(_kind))


# -- probes --------------------------------------------------------------------------------


def _probe_inputs() -> list[np.ndarray]:
    """Odd extents over the tree's leaf size, some values past float32's exact integers."""
    big = (image(37, 29, 3, "int32", salt=4).astype(np.int64) * 104729 - 2 ** 24)
    return [image(29, 37, 3, "uint8", salt=1), image(67, 5, 2, "float32", salt=2),
            image(7, 41, 1, "int16", salt=3), big.astype(np.int32),
            image(3, 3, 4, "uint16", salt=5) * np.uint16(250)]


def _probe(kind: str) -> Callable[[str], list[Case]]:
    def cases(variant: str) -> list[Case]:
        samples = _probe_inputs()
        found: list[Case] = []
        for axes, keep in ((None, False), ((0, 1), True), ((2,), False), ((0, 2), False),
                           ((-3,), True), ((), False)):
            args: dict[str, object] = {"keep_dims": keep}
            if axes is not None:
                args["axes"] = list(axes)
            if kind in WITH_MEAN:
                pairs: list[tuple[list[np.ndarray], dict[str, np.ndarray]]] = [
                    ([x, reduce_sample("probe", "mean", x, axes, keep)], {})
                         for x in samples]
                found.append(Case(args, pairs))
                found.append(Case({**args, "ddof": 1}, pairs))
            else:
                found.append(Case(args, [([x], {}) for x in samples]))
        if kind not in ("min", "max", "std_dev", "variance"):
            for dtype in ("float32", "uint8", "int64", "uint64"):
                typed = [x for x in samples if dtype in REDUCTION_TYPES[kind][x.dtype.name]]
                if typed:
                    found.append(Case({"dtype": dtype}, [([x], {}) for x in typed]))
        named = [[x, reduce_sample("probe", "mean", x, (0, 2), False)] for x in samples]
        found.append(Case({"axis_names": "HC"},
                          [(pair if kind in WITH_MEAN else pair[:1], {}) for pair in named]))
        return found

    return cases


for _kind in KINDS:
    op_probe(f"reductions.{_kind}")(_probe(_kind))
