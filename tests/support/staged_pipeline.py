"""The small CPU pipeline the staging tests send through an output ring or hand over as a
GPU pipeline's batches would be (``test_output_ring.py``, ``test_device_outputs.py``)."""

from __future__ import annotations

from typing import Any

from conveyor import fn, pipeline_def, types


@pipeline_def(batch_size=3, seed=4, prefetch_queue_depth=2, num_threads=2,
              enable_checkpointing=True)
def crops(root: str) -> Any:
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
    images = fn.decoders.image_random_crop(jpegs, output_type=types.RGB)
    return fn.resize(images, size=(24, 20)), labels
