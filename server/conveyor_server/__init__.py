"""Conveyor server: deterministic, checkpointable data pipelines served over gRPC."""

__version__ = "0.1.0"
