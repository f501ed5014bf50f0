"""Conveyor server: deterministic, checkpointable data pipelines served over gRPC.

Four rooms, each saying in its ``__init__`` what it holds and may import: ``engine``
(pipelines in process), ``store`` (Redis), ``service`` (gRPC) and ``app`` (the program);
``demo`` holds the demo. ``Pipeline`` is the engine's in-process pipeline.
"""

__version__ = "0.1.0"

from conveyor_server.engine.pipeline import Pipeline

__all__ = ["Pipeline", "__version__"]
