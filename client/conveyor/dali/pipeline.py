"""DALI's ``nvidia.dali.pipeline``: ``pipeline_def`` and ``Pipeline``, the class of what a
``@pipeline_def`` function returns (``conveyor.definition.pipeline.Pipeline``)."""

from __future__ import annotations

from conveyor.definition.decorator import pipeline_def
from conveyor.definition.pipeline import Pipeline

__all__ = ["Pipeline", "pipeline_def"]
