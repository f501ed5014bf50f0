"""Conveyor server: deterministic, checkpointable data pipelines served over gRPC.

Four rooms, each saying in its ``__init__`` what it holds and may import: ``engine``
(pipelines in process), ``store`` (Redis), ``service`` (gRPC) and ``app`` (the program);
``demo`` holds the demo. ``Pipeline`` is the engine's in-process pipeline, imported when
first used: the server's command line sets OpenCV's pixel cap before anything loads OpenCV.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from conveyor_server.engine.pipeline import Pipeline

__all__ = ["Pipeline", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Pipeline":
        from conveyor_server.engine.pipeline import Pipeline

        return Pipeline
    raise AttributeError(f"module 'conveyor_server' has no attribute {name!r}")
