"""Conveyor client: define pipelines, stream their batches, checkpoint and restore them."""

__version__ = "0.1.0"
