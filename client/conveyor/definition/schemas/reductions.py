"""The reduction operators' schemas (part of ``schema.SCHEMAS``): DALI's ``fn.reductions``
and ``fn.normalize`` (which reduces for its statistics), with DALI's argument names and
defaults.

Each reduces every sample on its own, over ``axes`` (indices, negative from the end) or
``axis_names`` (letters of the input's layout; the two are exclusive), all axes when neither
is given and none for ``axes=[]``; ``keep_dims`` keeps the reduced axes with extent 1.
``std_dev`` and ``variance`` take the mean as a second input (the output of
``fn.reductions.mean`` over the same axes, with or without ``keep_dims``) and ``ddof``, the
delta degrees of freedom the sum of squares is divided by (``n - ddof``).

``dtype`` is the output type and the type sums accumulate in, as DALI: "" takes the default,
the input type for ``min`` and ``max``, 64-bit integers for ``sum`` of integers, float32 for
``mean``, ``mean_square``, ``rms``, ``std_dev`` and ``variance``; ``REDUCTION_TYPES`` lists
the pairs DALI accepts. Inputs are integers of up to 64 bits or float32 (DALI's CPU
reductions take no float16 or float64).

``reduce_batch`` (reducing the batch as a whole) is declared so that a definition asking for
it is refused with a reason: every sample here is reduced on its own.
"""

from __future__ import annotations

from conveyor.definition.schemas.args import SEED_ARGS, Arg, OpSchema

#: The input types the reductions take.
REDUCTION_INPUTS = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
                    "float32")
_INTS = REDUCTION_INPUTS[:-1]


def _wide(t: str) -> str:
    return "int64" if t.startswith("i") else "uint64"


#: The output (accumulation) types each reduction accepts per input type; the first one is
#: the default.
REDUCTION_TYPES: dict[str, dict[str, tuple[str, ...]]] = {
    "sum": {**{t: (_wide(t), t, "float32") for t in _INTS if t[-2:] != "64"},
            "uint64": ("uint64",), "int64": ("int64",), "float32": ("float32",)},
    "mean": {**{t: ("float32", t) for t in _INTS}, "float32": ("float32",)},
    "mean_square": {**{t: ("float32", _wide(t)) for t in _INTS}, "float32": ("float32",)},
    "rms": {**{t: ("float32", t) for t in _INTS}, "float32": ("float32",)},
    "min": {t: (t,) for t in REDUCTION_INPUTS},
    "max": {t: (t,) for t in REDUCTION_INPUTS},
    "std_dev": {t: ("float32",) for t in REDUCTION_INPUTS},
    "variance": {t: ("float32",) for t in REDUCTION_INPUTS},
}
#: The reductions that take the mean as a second input.
WITH_MEAN = ("std_dev", "variance")

_AXES = {
    "axes": Arg("ints"),
    "axis_names": Arg("str"),
    "keep_dims": Arg("bool", default=False),
    "reduce_batch": Arg("bool", default=False),
}
_DTYPE = {"dtype": Arg("enum", default="", choices=("", *REDUCTION_INPUTS))}


def _schema(kind: str) -> OpSchema:
    if kind in WITH_MEAN:
        return OpSchema(2, ("output",), {**_AXES, "ddof": Arg("int", default=0, minimum=0)})
    if kind in ("min", "max"):
        return OpSchema(1, ("output",), dict(_AXES))
    return OpSchema(1, ("output",), {**_AXES, **_DTYPE})


#: The output types of ``normalize``.
NORMALIZE_TYPES = ("float32", "uint8", "int8", "uint16", "int16", "int32", "float16")

REDUCTION_SCHEMAS = {
    **{f"reductions.{kind}": _schema(kind) for kind in REDUCTION_TYPES},
    "normalize": OpSchema(
        1, ("output",),
        {"mean": Arg("float", tensor=True), "stddev": Arg("float", tensor=True, minimum=0),
         "axes": Arg("ints"), "axis_names": Arg("str"),
         "batch": Arg("bool", default=False),
         "ddof": Arg("int", default=0, minimum=0),
         "epsilon": Arg("float", default=0.0, minimum=0),
         "scale": Arg("float", default=1.0), "shift": Arg("float", default=0.0),
         "dtype": Arg("enum", default="float32", choices=NORMALIZE_TYPES), **SEED_ARGS},
        doc="`scale * (x - mean) / stddev + shift`, each sample on its own. `mean` and "
            "`stddev` given (a number, or fed per sample: a number or an array that "
            "broadcasts against the sample), or computed over `axes` / `axis_names` (all "
            "axes when neither is given) as `fn.reductions.mean` and `std_dev` compute them, "
            "`ddof` the delta degrees of freedom, `epsilon` added to the variance. An "
            "integer `dtype` rounds and clamps. `batch=True` (statistics over the whole "
            "batch) is refused.",
    ),
}
