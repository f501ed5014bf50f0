"""TensorFlow helpers for trainers (``pip install conveyor[tensorflow]``).

- ``ConveyorDataset``: a server's pipeline as a ``tf.data.Dataset`` of tensor tuples, whose
  position ``tf.train.Checkpoint`` saves and restores (``dataset.py``).
"""

try:
    import tensorflow  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError("conveyor.tf needs TensorFlow: pip install 'conveyor[tensorflow]'") \
        from exc

from conveyor.tf.dataset import ConveyorDataset

__all__ = ["ConveyorDataset"]
