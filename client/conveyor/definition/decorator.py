"""``@pipeline_def``: turn a DALI-style graph function into a pipeline.

Calling the decorated function records the operators it uses (nothing is executed) and
returns a ``conveyor.definition.pipeline.Pipeline``: its ``PipelineSpec`` (``.spec``) and DALI's
methods, run in process once built. Pipeline arguments given to the decorator can be
overridden per call; ``checkpoint=blob`` restores, as DALI's.
"""

from __future__ import annotations

import functools
import inspect
import secrets
from collections.abc import Callable, Iterable
from typing import Any, overload

from conveyor.definition.graph import DataNode, building
from conveyor.definition.pipeline import Pipeline, RunOptions
from conveyor.definition.spec import SPEC_VERSION, validate_spec
from conveyor.definition.unsupported import PORTING_PAGE, not_supported
from conveyor.errors import InvalidArgument
from conveyor.v1 import pipeline_pb2

#: Pipeline-level arguments (as DALI's pipeline_def) that make the spec, and their defaults.
SPEC_ARGS: dict[str, Any] = {
    "batch_size": -1,
    "num_threads": 1,
    "seed": None,
    "enable_checkpointing": False,
    "prefetch_queue_depth": 2,
    "device_id": None,
    "py_num_workers": 1,
    "py_start_method": "fork",
}
#: DALI's values of ``py_start_method`` (a server starts its workers with "spawn" whatever
#: is asked: a process serving gRPC must not fork).
START_METHODS = ("fork", "spawn")
#: DALI's pipeline arguments that are not part of the spec: what each does here is
#: ``conveyor.definition.pipeline.RunOptions``'s docstring (checked, or accepted with no effect).
RUN_ARGS: dict[str, Any] = {
    "exec_async": True,
    "exec_pipelined": True,
    "set_affinity": False,
    "exec_dynamic": False,
    "output_dtype": None,
    "output_ndim": None,
}
#: Every pipeline argument ``@pipeline_def`` and its functions take.
PIPELINE_ARGS: dict[str, Any] = {**SPEC_ARGS, **RUN_ARGS}
#: DALI's pipeline arguments that Conveyor does not take: given to a pipeline function that
#: has no parameter of that name, each is ``NotSupported`` (not passed on to the function).
DALI_ONLY_ARGS = ("bytes_per_sample", "default_cuda_stream_priority", "enable_memory_stats",
                  "enable_sanity_checks", "experimental_exec_dynamic",
                  "max_streams", "py_callback_pickler", "stream")


def refuse_unknown(names: Iterable[str]) -> None:
    """``NotSupported`` for the first of ``names`` that is no pipeline argument."""
    for name in names:
        if name in DALI_ONLY_ARGS:
            raise not_supported("DALI's pipeline argument", name, PIPELINE_ARGS,
                                op="pipeline_def", page=PORTING_PAGE, spell="{!r}",
                                suggest=False)
        if name not in PIPELINE_ARGS:
            raise not_supported("unknown pipeline argument", name, PIPELINE_ARGS,
                                op="pipeline_def", page=PORTING_PAGE, spell="{!r}")


def _takes(graph_fn: Callable[..., Any], name: str) -> bool:
    """Whether ``graph_fn`` has a parameter ``name`` (or takes any keyword)."""
    try:
        params = inspect.signature(graph_fn).parameters
    except (TypeError, ValueError):
        return True
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def build_spec(
    graph_fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
    pipeline_args: dict[str, Any],
) -> pipeline_pb2.PipelineSpec:
    refuse_unknown(sorted(set(pipeline_args) - set(SPEC_ARGS)))
    merged = {**SPEC_ARGS, **pipeline_args}
    batch_size = merged["batch_size"]
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidArgument(f"pipeline_def: argument 'batch_size': got {batch_size!r}, "
                              "expected an int >= 1")
    seed = merged["seed"]
    seed_drawn = seed is None or seed == -1
    if seed_drawn:
        seed = secrets.randbits(63)  # drawn once, then stored in the spec
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InvalidArgument(f"pipeline_def: argument 'seed': got {seed!r}, expected an int >= 0")
    for name in ("num_threads", "prefetch_queue_depth", "py_num_workers"):
        value = merged[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidArgument(f"pipeline_def: argument '{name}': got {value!r}, "
                                  "expected an int >= 1")
    if merged["py_start_method"] not in START_METHODS:
        raise InvalidArgument(f"pipeline_def: argument 'py_start_method': got "
                              f"{merged['py_start_method']!r}, expected one of "
                              f"{', '.join(repr(m) for m in START_METHODS)}")
    device_id = merged["device_id"]
    with building(None if device_id is None else int(device_id)) as builder:
        result = graph_fn(*args, **kwargs)
    outputs = result if isinstance(result, tuple | list) else (result,)
    spec = pipeline_pb2.PipelineSpec(
        spec_version=SPEC_VERSION,
        batch_size=batch_size,
        num_threads=merged["num_threads"],
        seed=seed,
        seed_drawn=seed_drawn,
        enable_checkpointing=bool(merged["enable_checkpointing"]),
        prefetch_queue_depth=merged["prefetch_queue_depth"],
        device_id=-1 if device_id is None else int(device_id),
        definition=getattr(graph_fn, "__name__", ""),
        # DALI's defaults are left unset (0 and "" read as 1 and "fork"): the spec of a
        # pipeline without parallel sources is what it was before they existed.
        py_num_workers=0 if merged["py_num_workers"] == 1 else merged["py_num_workers"],
        py_start_method="" if merged["py_start_method"] == "fork" else merged["py_start_method"],
    )
    spec.ops.extend(builder.ops)
    for i, out in enumerate(outputs):
        if not isinstance(out, DataNode) or out.builder is not builder:
            raise InvalidArgument(
                f"pipeline_def: output {i} of {spec.definition} is {out!r}, "
                "expected an operator output"
            )
        spec.outputs.append(out.ref())
    validate_spec(spec)
    return spec


@overload
def pipeline_def(fn: Callable[..., Any], **pipeline_args: Any) -> Callable[..., Pipeline]: ...


@overload
def pipeline_def(
    fn: None = None, **pipeline_args: Any
) -> Callable[[Callable[..., Any]], Callable[..., Pipeline]]: ...


def pipeline_def(
    fn: Callable[..., Any] | None = None, **pipeline_args: Any
) -> Any:
    """Decorator: ``@pipeline_def(batch_size=8, seed=12, ...)`` → a function returning a
    ``conveyor.definition.pipeline.Pipeline``. Each call takes the graph function's own
    arguments, any pipeline argument (``PIPELINE_ARGS``) to override the decorator's, and
    ``checkpoint=blob`` to restore from (where no seed is given, the checkpoint's is taken).
    """

    refuse_unknown(pipeline_args)

    def decorate(graph_fn: Callable[..., Any]) -> Callable[..., Pipeline]:
        @functools.wraps(graph_fn)
        def make_pipeline(*args: Any, checkpoint: bytes | None = None,
                          **kwargs: Any) -> Pipeline:
            refuse_unknown(k for k in kwargs if k in DALI_ONLY_ARGS and not _takes(graph_fn, k))
            overrides = {k: kwargs.pop(k) for k in list(kwargs) if k in PIPELINE_ARGS}
            given = {**pipeline_args, **overrides}
            spec = build_spec(graph_fn, args, kwargs,
                              {k: v for k, v in given.items() if k not in RUN_ARGS})
            options = RunOptions(**{k: v for k, v in given.items() if k in RUN_ARGS})
            return Pipeline(spec, checkpoint=checkpoint, options=options)

        return make_pipeline

    return decorate(fn) if fn is not None else decorate
