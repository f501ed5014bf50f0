"""TensorFlow helpers for trainers (TensorFlow: the client's ``tensorflow`` extra, ``pip
install './client[tensorflow]'`` from a clone).

- ``ConveyorDataset``: a server's pipeline as a ``tf.data.Dataset`` of tensor tuples, whose
  position ``tf.train.Checkpoint`` saves and restores (``dataset.py``).
"""

try:
    import tensorflow  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError("conveyor.tf needs TensorFlow: pip install tensorflow") \
        from exc

from conveyor.tf.dataset import ConveyorDataset

__all__ = ["ConveyorDataset"]
