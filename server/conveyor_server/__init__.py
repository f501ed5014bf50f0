"""Conveyor server: deterministic, checkpointable data pipelines served over gRPC."""

__version__ = "0.1.0"

from conveyor_server.engine.pipeline import Pipeline

__all__ = ["Pipeline", "__version__"]
