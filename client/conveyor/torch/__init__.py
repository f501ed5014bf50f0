"""PyTorch helpers for trainers (PyTorch: the client's ``torch`` extra, ``pip install
'./client[torch]'`` from a clone).

- ``ConveyorDataset``: a server's pipeline as an ``IterableDataset`` of tensor tuples, whose
  ``state_dict`` is the trainer's position (``dataset.py``).
- ``crop_mirror_normalize``: normalise on the trainer's device what the server sent as
  uint8, so the wire carries a quarter of the float32 bytes.
"""

from conveyor.torch.dataset import ConveyorDataset
from conveyor.torch.normalize import crop_mirror_normalize

__all__ = ["ConveyorDataset", "crop_mirror_normalize"]
