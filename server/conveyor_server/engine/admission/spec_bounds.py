"""Bounds on the specs a server accepts, checked before anything is built from one.

A spec comes from the network, and nothing in its encoding bounds what it asks for: a
prefetch depth of 10^9 batches, a batch of 2^31 samples, a resize to 10^6 x 10^6 pixels or a
random draw of 10^9 values per sample would each have the server allocate until it dies.
``check_spec`` refuses such a spec in time proportional to its size, in three passes:

1. sizes read from the fields as they arrived (the encoded size, batch size, threads,
   prefetch depth, operator count, every string and list, the names in file paths),
   before anything else reads them, so that no later check or error message handles an
   unbounded value;
2. the spec's validity (``conveyor.definition.spec.validate_spec``: the graph and every argument);
3. each operator's sizes fixed by its constant arguments: every extent argument against
   ``limits.max_extent``, and where the output's shape follows from the arguments alone
   (a crop window, a resize to a given size, a random draw's shape) its pixels and the
   bytes of one sample, and of one batch when it is a pipeline output, before a byte of it
   is allocated. Sizes that depend on the images are checked as each sample is made
   (``EngineLimits.check_output``).

A spec over a bound is ``ResourceExhausted``, one that is malformed ``InvalidArgument``;
both name the field (``ops[3].args.size``) and, for a bound, the limit, in the message and
in the error's metadata (``field``, ``limit``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

from conveyor.definition.schemas import registry as schema
from conveyor.definition.spec import validate_spec
from conveyor.errors import InvalidArgument, ResourceExhausted
from conveyor.v1 import pipeline_pb2
from conveyor_server.engine.admission.limits import EngineLimits, SpecBounds

#: The longest name a path component may have (Linux's NAME_MAX, in bytes): no file system
#: holds a longer one, and the kernel refuses it with an error of its own. Which arguments
#: are paths, extents or lists as long as the data set, and which outputs the arguments
#: size, each operator's schema declares (``Arg.path``, ``Arg.extent``, ``Arg.unbounded``,
#: ``OpSchema.fixed_output``).
NAME_MAX = 255


def check_spec(spec: pipeline_pb2.PipelineSpec, limits: EngineLimits) -> None:
    """Validate ``spec`` and, where ``limits.spec`` is set, refuse one over its bounds or
    whose fixed sizes are over ``limits``' (see the module's docstring)."""
    bounds = limits.spec
    if bounds is not None:
        _check_sizes(spec, bounds)
    validate_spec(spec)
    if bounds is not None:
        outputs = {(ref.op, ref.output) for ref in spec.outputs}
        for index, op in enumerate(spec.ops):
            _check_op_sizes(index, op, spec.batch_size, (index, 0) in outputs, bounds, limits)


# -- pass 1: sizes as received ------------------------------------------------------------


def _check_sizes(spec: pipeline_pb2.PipelineSpec, bounds: SpecBounds) -> None:
    size = spec.ByteSize()
    if size > bounds.max_spec_bytes:
        raise bounds.over("spec", f"encoded in {size:,} bytes", "max_spec_bytes")
    for field, attr in (("batch_size", "max_batch_size"), ("num_threads", "max_threads"),
                        ("prefetch_queue_depth", "max_prefetch_depth"),
                        ("py_num_workers", "max_threads")):
        value = getattr(spec, field)
        if value > getattr(bounds, attr):
            raise bounds.over(field, f"{value:,}", attr)
    for field in ("ops", "outputs"):
        count = len(getattr(spec, field))
        if count > bounds.max_ops:
            raise bounds.over(field, f"{count:,} entries", "max_ops")
    _check_name("definition", spec.definition, bounds)
    for index, op in enumerate(spec.ops):
        where = f"ops[{index}]"
        for field in ("type", "name", "device"):
            _check_name(f"{where}.{field}", getattr(op, field), bounds)
        for name in op.arg_inputs:
            _check_name(f"{where}.arg_inputs", name, bounds)
        declared = schema.SCHEMAS.get(op.type)  # an unknown one is refused by pass 2
        for name, argument in op.args.items():
            _check_name(f"{where}.args", name, bounds)
            arg = declared.args.get(name) if declared is not None else None
            _check_argument(f"{where}.args.{name}", argument,
                            arg is not None and arg.unbounded, bounds)
            if arg is not None and arg.path:
                _check_paths(f"{where}.args.{name}", argument)
        depth = op.args.get("prefetch_queue_depth")  # a parallel source's batches ahead
        if depth is not None and depth.WhichOneof("value") == "i" and \
                depth.i > bounds.max_prefetch_depth:
            raise bounds.over(f"{where}.args.prefetch_queue_depth", f"{depth.i:,}",
                              "max_prefetch_depth")


def _check_name(field: str, value: str, bounds: SpecBounds) -> None:
    if len(value) > bounds.max_name_chars:
        raise bounds.over(field, f"{len(value):,} characters", "max_name_chars")


def _check_argument(field: str, argument: pipeline_pb2.Argument, long_list: bool,
                    bounds: SpecBounds) -> None:
    which = argument.WhichOneof("value")
    if which == "s" and len(argument.s) > bounds.max_string_chars:
        raise bounds.over(field, f"{len(argument.s):,} characters", "max_string_chars")
    if which not in ("ints", "floats", "strings"):
        return
    values = getattr(argument, which).values
    if len(values) > bounds.max_list_items and not long_list:
        raise bounds.over(field, f"{len(values):,} entries", "max_list_items")
    if which == "strings":
        for i, value in enumerate(values):
            if len(value) > bounds.max_string_chars:
                raise bounds.over(f"{field}[{i}]", f"{len(value):,} characters",
                                  "max_string_chars")


def _check_paths(field: str, argument: pipeline_pb2.Argument) -> None:
    which = argument.WhichOneof("value")
    paths = [argument.s] if which == "s" else list(argument.strings.values) \
        if which == "strings" else []
    for i, path in enumerate(paths):
        longest = max((len(part.encode()) for part in path.split("/")), default=0)
        if longest > NAME_MAX:
            where = field if which == "s" else f"{field}[{i}]"
            raise InvalidArgument(f"{where}: a path component of {longest:,} bytes; no file "
                                  f"name is longer than {NAME_MAX}", field=where)


# -- pass 3: each operator's fixed sizes ---------------------------------------------------


def _check_op_sizes(index: int, op: pipeline_pb2.OpSpec, batch_size: int, is_output: bool,
                    bounds: SpecBounds, limits: EngineLimits) -> None:
    args = schema.decode_args(op)
    declared = schema.schema_of(op.type)
    where = f"ops[{index}].args"
    for name, value in _extents(declared, args):
        if limits.max_extent is not None and value > limits.max_extent:
            raise ResourceExhausted(
                f"{where}.{name} ({op.type}): {value:,.0f} pixels, above the server's limit "
                f"limits.max_extent = {limits.max_extent:,}",
                field=f"{where}.{name}", limit="limits.max_extent")
    rule = declared.fixed_output
    fixed = rule(args, frozenset(op.arg_inputs)) if rule is not None else None
    if fixed is None:
        return
    field = f"{where}.{fixed.arg}"
    count = math.prod(fixed.shape)
    if fixed.image:
        pixels = limits.max_image_pixels
        if pixels is not None and count > pixels:
            raise ResourceExhausted(
                f"{field} ({op.type}): an output of {'x'.join(map(str, fixed.shape))} = "
                f"{count:,} pixels, above the server's limit limits.max_image_pixels = "
                f"{pixels:,}", field=field, limit="limits.max_image_pixels")
    elif count > bounds.max_random_values:
        raise bounds.over(field, f"{count:,} values per sample ({op.type})",
                          "max_random_values")
    _check_bytes(field, op.type, count * fixed.itemsize, batch_size, is_output, limits)


def _check_bytes(field: str, op_type: str, sample_bytes: int, batch_size: int,
                 is_output: bool, limits: EngineLimits) -> None:
    limit = limits.max_batch_bytes
    if limit is None:
        return
    if sample_bytes > limit:
        what = f"one sample of its output takes at least {sample_bytes:,} bytes"
    elif is_output and sample_bytes * batch_size > limit:
        what = (f"a batch of its output takes at least {batch_size:,} x {sample_bytes:,} = "
                f"{batch_size * sample_bytes:,} bytes")
    else:
        return
    raise ResourceExhausted(f"{field} ({op_type}): {what}, above the server's limit "
                            f"limits.max_batch_bytes = {limit:,}",
                            field=field, limit="limits.max_batch_bytes")


def _extents(declared: schema.OpSchema, args: Mapping[str, Any]) -> Iterator[tuple[str, float]]:
    for name, arg in declared.args.items():
        if not arg.extent:
            continue
        value = args.get(name)
        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, int | float):
                yield name, v
