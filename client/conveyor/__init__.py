"""Conveyor client: define pipelines, stream their batches, checkpoint and restore them."""

from conveyor import errors, fn, types
from conveyor.client import Checkpoint, Client, RemotePipeline
from conveyor.credentials import TlsOptions
from conveyor.pipeline_def import pipeline_def
from conveyor.tensor_list import TensorList

__version__ = "0.1.0"

__all__ = [
    "Checkpoint", "Client", "RemotePipeline", "TensorList", "TlsOptions", "__version__",
    "errors", "fn", "pipeline_def", "types",
]
