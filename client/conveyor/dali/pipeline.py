"""DALI's ``nvidia.dali.pipeline``: ``pipeline_def`` and ``Pipeline``, the class of what a
``@pipeline_def`` function returns.

It is ``conveyor.definition.pipeline.Pipeline`` and ``conveyor.pipeline_def``, but its
outputs come as DALI's: ``run()``, ``outputs()`` and ``share_outputs()`` give
``TensorListCPU``s, whose samples and ``as_tensor()`` are ``TensorCPU``s
(``images[0].shape()``), where Conveyor's own API gives numpy arrays
(``conveyor.dali.tensors``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from conveyor.dali.tensors import TensorListCPU
from conveyor.definition import pipeline as _pipeline
from conveyor.definition.decorator import pipeline_def as _pipeline_def

__all__ = ["Pipeline", "pipeline_def"]


class Pipeline(_pipeline.Pipeline):
    """``conveyor.definition.pipeline.Pipeline`` whose batches are DALI's ``TensorListCPU``s."""

    __slots__ = ()

    @classmethod
    def of(cls, pipe: _pipeline.Pipeline) -> Pipeline:
        """The unbuilt ``pipe`` (its spec, checkpoint and options) as DALI's pipeline."""
        return cls(pipe.spec, checkpoint=pipe._checkpoint, options=pipe.options)

    def run(self) -> tuple[TensorListCPU, ...]:
        self.schedule_run()
        return self.outputs()

    def outputs(self) -> tuple[TensorListCPU, ...]:
        return tuple(TensorListCPU.of(out) for out in super().outputs())

    def share_outputs(self) -> tuple[TensorListCPU, ...]:
        return tuple(TensorListCPU.of(out) for out in super().share_outputs())


def pipeline_def(fn: Callable[..., Any] | None = None, **pipeline_args: Any) -> Any:
    """DALI's decorator: ``conveyor.pipeline_def``'s arguments and checks, making this
    module's ``Pipeline``."""
    conveyor_decorate = _pipeline_def(**pipeline_args)

    def decorate(graph_fn: Callable[..., Any]) -> Callable[..., Pipeline]:
        make = conveyor_decorate(graph_fn)

        @functools.wraps(graph_fn)
        def make_pipeline(*args: Any, **kwargs: Any) -> Pipeline:
            return Pipeline.of(make(*args, **kwargs))

        return make_pipeline

    return decorate(fn) if fn is not None else decorate
