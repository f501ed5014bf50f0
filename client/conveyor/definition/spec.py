"""Pipeline specs: validation, the fingerprint, and naming the first difference of two."""

from __future__ import annotations

import hashlib
from typing import Protocol

from conveyor.definition import external_source
from conveyor.definition.schemas.registry import decode_args, decode_value, num_outputs, schema_of
from conveyor.errors import InvalidArgument, SpecError
from conveyor.v1 import pipeline_pb2

#: Version of the spec semantics; part of the fingerprint.
SPEC_VERSION = 1

#: Fields that do not affect the output stream, left out of the fingerprint.
NON_STREAM_FIELDS = ("num_threads", "prefetch_queue_depth", "definition", "device_id",
                     "seed_drawn", "py_num_workers", "py_start_method")
#: Operator arguments left out of the fingerprint, so that a restore may change them: what
#: happens to a sample that fails (a pipeline stopped by a corrupt file resumes with
#: ``on_error="skip"``; the batches before it are the same under any policy), and how an
#: external source is fed (``parallel``: in worker processes or not; its
#: ``prefetch_queue_depth``), which changes no byte.
RESTORE_MAY_CHANGE_ARGS = ("on_error", "parallel", "prefetch_queue_depth")


class HasSpec(Protocol):
    """What carries a spec: the pipeline a ``@pipeline_def`` function returns."""

    @property
    def spec(self) -> pipeline_pb2.PipelineSpec: ...


#: What is taken wherever a spec is: a ``PipelineSpec`` or a pipeline carrying one.
Definition = pipeline_pb2.PipelineSpec | HasSpec


def as_spec(definition: Definition) -> pipeline_pb2.PipelineSpec:
    """The ``PipelineSpec`` of ``definition``: a spec itself, or what a ``@pipeline_def``
    function returns (a ``conveyor.definition.pipeline.Pipeline``). Wherever a spec is taken,
    either is."""
    if isinstance(definition, pipeline_pb2.PipelineSpec):
        return definition
    spec = getattr(definition, "spec", None)
    if isinstance(spec, pipeline_pb2.PipelineSpec):
        return spec
    raise InvalidArgument(
        f"expected a pipeline (what a @pipeline_def function returns) or a PipelineSpec, got "
        f"{type(definition).__name__}")


def with_checkpoint_seed(
    given: pipeline_pb2.PipelineSpec, saved: pipeline_pb2.PipelineSpec,
) -> pipeline_pb2.PipelineSpec:
    """``given`` as restored from a checkpoint made with ``saved``: where ``given``'s seed was
    drawn (no seed was given, as DALI's default), the checkpoint's seed and whether that was
    drawn; an explicit seed is kept, for ``first_difference`` to compare."""
    if not given.seed_drawn or given.seed == saved.seed:
        return given
    adopted = pipeline_pb2.PipelineSpec()
    adopted.CopyFrom(given)
    adopted.seed = saved.seed
    adopted.seed_drawn = saved.seed_drawn
    return adopted


def validate_spec(spec: pipeline_pb2.PipelineSpec) -> None:
    """Check graph structure and every argument; raise InvalidArgument naming what is wrong."""
    if spec.spec_version != SPEC_VERSION:
        raise InvalidArgument(
            f"spec_version {spec.spec_version} is not supported (this build reads {SPEC_VERSION})"
        )
    if spec.batch_size < 1:
        raise InvalidArgument("pipeline: batch_size must be >= 1")
    if not spec.ops:
        raise InvalidArgument("pipeline: has no operators")
    if not spec.outputs:
        raise InvalidArgument("pipeline: returns no outputs")
    for index, op in enumerate(spec.ops):
        schema = schema_of(op.type)
        where = f"{op.type} (op {index})"
        if op.num_outputs != num_outputs(op):
            raise SpecError(where, None, f"has {op.num_outputs} outputs, expected "
                            f"{num_outputs(op)}")
        if len(op.inputs) not in schema.input_counts:
            raise SpecError(where, None,
                            f"takes {schema.inputs_text()} input(s), got {len(op.inputs)}")
        if op.device not in schema.devices:
            raise SpecError(op.type, "device", f"got {op.device!r}, expected one of "
                            + ", ".join(repr(d) for d in schema.devices))
        refs = [*op.inputs, *op.arg_inputs.values()]
        for ref in refs:
            if ref.op >= index:
                raise SpecError(where, None, f"input refers to op {ref.op}, which does not "
                                "come before it")
            if ref.output >= spec.ops[ref.op].num_outputs:
                raise SpecError(where, None, f"input refers to output {ref.output} of op "
                                f"{ref.op}, which has {spec.ops[ref.op].num_outputs}")
        decode_args(op)
    for ref in spec.outputs:
        if ref.op >= len(spec.ops) or ref.output >= spec.ops[ref.op].num_outputs:
            raise InvalidArgument(f"pipeline: output refers to op {ref.op} output {ref.output}, "
                                  "which does not exist")


def canonical(spec: pipeline_pb2.PipelineSpec) -> pipeline_pb2.PipelineSpec:
    """A copy holding only what affects the output stream."""
    copy = pipeline_pb2.PipelineSpec()
    copy.CopyFrom(spec)
    for name in NON_STREAM_FIELDS:
        copy.ClearField(name)
    for op in copy.ops:
        op.ClearField("name")
        for name in RESTORE_MAY_CHANGE_ARGS:
            if name in op.args:
                del op.args[name]
        if op.type == "external_source" and "source" in op.args:
            # ``name~n`` tells apart objects of one definition in one process; a pipeline
            # rebuilt from the same definition is the same stream.
            op.args["source"].s = external_source.definition(op.args["source"].s)
    return copy


def fingerprint(spec: pipeline_pb2.PipelineSpec) -> bytes:
    """SHA-256 of the canonical, deterministic encoding of the stream-affecting fields."""
    return hashlib.sha256(canonical(spec).SerializeToString(deterministic=True)).digest()


def _fmt(value: object) -> str:
    return repr(value) if value is not None else "(unset)"


def first_difference(
    old: pipeline_pb2.PipelineSpec, new: pipeline_pb2.PipelineSpec,
    old_label: str = "checkpoint", new_label: str = "pipeline",
) -> str | None:
    """Describe the first stream-affecting difference, or None if the fingerprints agree."""
    a, b = canonical(old), canonical(new)
    if a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True):
        return None

    def both(what: str, x: object, y: object) -> str:
        return f"{what}: {old_label} has {_fmt(x)}, {new_label} has {_fmt(y)}"

    if a.seed != b.seed:
        return (both("seed", a.seed, b.seed) + f" (give seed={a.seed}, or no seed to take "
                f"the {old_label}'s)")
    for field in ("spec_version", "batch_size", "enable_checkpointing"):
        if getattr(a, field) != getattr(b, field):
            return both(field, getattr(a, field), getattr(b, field))
    if len(a.ops) != len(b.ops):
        return both("number of operators", len(a.ops), len(b.ops))
    for i, (x, y) in enumerate(zip(a.ops, b.ops, strict=True)):
        where = f"op {i} ({x.type})"
        if x.type != y.type:
            return both(f"op {i} type", x.type, y.type)
        if x.device != y.device:
            return both(f"{where} device", x.device, y.device)
        if list(x.inputs) != list(y.inputs):
            return both(f"{where} inputs", [(r.op, r.output) for r in x.inputs],
                        [(r.op, r.output) for r in y.inputs])
        for name in sorted(set(x.args) | set(y.args)):
            xv = decode_value(x.args[name]) if name in x.args else None
            yv = decode_value(y.args[name]) if name in y.args else None
            if xv != yv:
                return both(f"{where} argument '{name}'", xv, yv)
        for name in sorted(set(x.arg_inputs) | set(y.arg_inputs)):
            xr = x.arg_inputs.get(name)
            yr = y.arg_inputs.get(name)
            xt = (xr.op, xr.output) if xr is not None else None
            yt = (yr.op, yr.output) if yr is not None else None
            if xt != yt:
                return both(f"{where} argument input '{name}'", xt, yt)
    if list(a.outputs) != list(b.outputs):
        return both("outputs", [(r.op, r.output) for r in a.outputs],
                    [(r.op, r.output) for r in b.outputs])
    return "the encoded specs differ"
