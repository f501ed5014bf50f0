"""The demo's pipeline: shuffled JPEGs decoded and rotated by a random angle.

A module of its own, beside the demo program (``run.py``), so that a process that only
defines it (a trainer the tests start, a benchmark's client) imports the definition
contract alone, not OpenCV, Redis or the server launcher the program uses.
"""

from __future__ import annotations

from typing import Any

from conveyor import fn, pipeline_def, types

BATCH_SIZE = 8


@pipeline_def(batch_size=BATCH_SIZE, num_threads=2, device_id=0, enable_checkpointing=True,
              seed=12)
def rotate_pipeline(image_dir: str) -> Any:
    jpegs, labels = fn.readers.file(file_root=image_dir, random_shuffle=True, name="image_reader")
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    angles = fn.random.uniform(range=(-30.0, 30.0))
    rotated = fn.rotate(images, angle=angles, fill_value=0)
    return rotated, labels, angles
