"""The GPU decoder behind the same operator interface (skipped where there is no CUDA)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor import fn, pipeline_def, types
from conveyor_server import Pipeline
from tests.images import make_image_folder
from tests.resume import assert_resume_exact


@pipeline_def(batch_size=4, seed=3, enable_checkpointing=True)
def decode_on(root: str, device: str) -> Any:
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
    return fn.decoders.image(jpegs, device=device, output_type=types.RGB), labels


@pytest.mark.gpu
def test_mixed_decoder_matches_the_cpu_decoder_and_resumes_exactly(tmp_path: Path) -> None:
    root = str(make_image_folder(tmp_path / "imgs", counts=(4, 4)))
    with Pipeline(decode_on(root, "cpu")) as cpu, Pipeline(decode_on(root, "mixed")) as gpu:
        for _ in range(3):
            (a, la), (b, lb) = cpu.run(), gpu.run()
            assert [int(x[0]) for x in la] == [int(x[0]) for x in lb]
            for x, y in zip(a, b, strict=True):
                assert x.shape == y.shape and x.dtype == y.dtype == np.uint8
                # Different IDCTs: close, not bit-identical.
                assert float(np.abs(x.astype(np.int16) - y.astype(np.int16)).mean()) < 2.0
    assert_resume_exact(decode_on(root, "mixed"), 2, 3)
