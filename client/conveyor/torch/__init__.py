"""PyTorch helpers for trainers (``pip install conveyor[torch]``).

- ``crop_mirror_normalize``: normalise on the trainer's device what the server sent as
  uint8, so the wire carries a quarter of the float32 bytes.
"""

from conveyor.torch.normalize import crop_mirror_normalize

__all__ = ["crop_mirror_normalize"]
