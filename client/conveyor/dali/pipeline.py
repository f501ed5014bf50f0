"""DALI's ``nvidia.dali.pipeline``: ``pipeline_def`` and ``Pipeline``, the class of what a
``@pipeline_def`` function returns (``conveyor.pipeline.Pipeline``)."""

from __future__ import annotations

from conveyor.pipeline import Pipeline
from conveyor.pipeline_decorator import pipeline_def

__all__ = ["Pipeline", "pipeline_def"]
