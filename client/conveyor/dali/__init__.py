"""DALI's names, for a port that changes only its imports: ``nvidia.dali`` → ``conveyor.dali``.

``from conveyor.dali import fn, types, pipeline_def`` (and ``import conveyor.dali.fn as fn``,
``import conveyor.dali.types as types``, ``from conveyor.dali.pipeline import pipeline_def,
Pipeline``, ``from conveyor.dali import tfrecord as tfrec``) give Conveyor's operators,
constants and decorator under DALI's module names. They are ``conveyor.fn``,
``conveyor.types``, ``conveyor.definition.tfrecord`` and the decorator
``conveyor.pipeline_def``: where
Conveyor differs from DALI is in docs/porting-from-dali.md. DALI's PyTorch iterators are
``conveyor.dali.plugin.pytorch`` (imported on its own: it loads torch when an iterator is
made). A name DALI has and Conveyor does not raises ``conveyor.errors.NotSupported``.
Imports no gRPC.
"""

from __future__ import annotations

from conveyor.dali import fn, pipeline, tfrecord, types
from conveyor.dali.pipeline import Pipeline, pipeline_def

__all__ = ["Pipeline", "fn", "pipeline", "pipeline_def", "tfrecord", "types"]
