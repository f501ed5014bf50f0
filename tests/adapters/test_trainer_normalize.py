"""Normalising on the trainer: the server sends the cropped, mirrored pixels as uint8 and
``conveyor.torch.crop_mirror_normalize`` gives, on the CPU, the very bytes the server's
``crop_mirror_normalize`` would have sent in float32 (and float16)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from conveyor import fn, pipeline_def, types
from conveyor.errors import InvalidArgument
from conveyor.torch import crop_mirror_normalize
from conveyor_server import Pipeline
from tests.support.images import make_image_folder

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]
#: (dtype, layout, pad_output, scale, shift) of the server's outputs after the raw one.
FORMS = [(types.FLOAT, "CHW", False, 1.0, 0.0), (types.FLOAT16, "CHW", False, 1.0, 0.0),
         (types.FLOAT, "HWC", True, 1.0, 0.0), (types.FLOAT16, "HWC", True, 64.0, 128.0),
         (types.FLOAT, "CHW", False, 1 / 3, -0.1)]
TORCH_DTYPES = {types.FLOAT: torch.float32, types.FLOAT16: torch.float16}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_image_folder(tmp_path_factory.mktemp("trainer-norm") / "imgs", counts=(4, 5),
                             size=(37, 53))


def pipeline(root: str) -> Any:
    @pipeline_def(batch_size=3, num_threads=2, seed=11)
    def train() -> Any:
        jpegs, _ = fn.readers.file(file_root=root, random_shuffle=True)
        images = fn.decoders.image(jpegs, output_type=types.RGB)
        mirror = fn.random.coin_flip()
        x, y = fn.random.uniform(range=(0.0, 1.0)), fn.random.uniform(range=(0.0, 1.0))
        window: dict[str, Any] = {"crop": (29, 31), "crop_pos_x": x, "crop_pos_y": y,
                                  "mirror": mirror}
        raw = fn.crop_mirror_normalize(images, mean=[0.0], std=[1.0], dtype=types.UINT8,
                                       output_layout="HWC", **window)
        outs = [fn.crop_mirror_normalize(images, mean=MEAN, std=STD, dtype=dtype,
                                         output_layout=layout, pad_output=pad, scale=scale,
                                         shift=shift, **window)
                for dtype, layout, pad, scale, shift in FORMS]
        return (raw, *outs)

    return train()


def test_the_trainer_gets_the_servers_bytes(data: Path) -> None:
    with Pipeline(pipeline(str(data))) as pipe:
        for _ in range(4):
            raw, *server = pipe.run()
            batch = torch.from_numpy(raw.as_array())
            for (dtype, layout, pad, scale, shift), sent in zip(FORMS, server, strict=True):
                mine = crop_mirror_normalize(batch, mean=MEAN, std=STD, scale=scale,
                                             shift=shift, dtype=TORCH_DTYPES[dtype],
                                             output_layout=layout, pad_output=pad)
                expected = sent.as_array()
                assert mine.numpy().dtype == expected.dtype
                assert mine.numpy().tobytes() == expected.tobytes(), (dtype, layout, pad)
                one = crop_mirror_normalize(batch[1], mean=MEAN, std=STD, scale=scale,
                                            shift=shift, dtype=TORCH_DTYPES[dtype],
                                            output_layout=layout, pad_output=pad)
                assert one.numpy().tobytes() == expected[1].tobytes()


def test_bad_arguments_name_themselves() -> None:
    images = torch.zeros((2, 4, 4, 3), dtype=torch.uint8)
    with pytest.raises(InvalidArgument, match="std has 2 values"):
        crop_mirror_normalize(images, mean=[0.0], std=[1.0, 2.0])
    with pytest.raises(InvalidArgument, match="output_layout"):
        crop_mirror_normalize(images, mean=[0.0], std=[1.0], output_layout="NCHW")
    with pytest.raises(InvalidArgument, match="dtype"):
        crop_mirror_normalize(images, mean=[0.0], std=[1.0], dtype=torch.int8)
    # The server's operator refuses a zero std; here it gave NaN and infinities silently.
    with pytest.raises(InvalidArgument, match=r"std \[1.0, 0.0, 2.0\]: values must be non-zero"):
        crop_mirror_normalize(images, mean=[0.0], std=[1.0, 0.0, 2.0])


def test_random_windows_channels_and_arguments_match_the_servers_arithmetic() -> None:
    """Odd sizes, windows at the edges, mirrored views, 1-5 channels, one value or one per
    channel, any scale and shift (float16 overflowing to infinity included): the helper's
    bytes are those of the server's per-sample and per-batch code."""
    from conveyor.definition.normalization import folded_coefficients, next_pow2
    from conveyor_server.engine.ops.args import per_channel
    from conveyor_server.engine.ops.normalize.normalize import normalize
    from conveyor_server.engine.ops.normalize.normalize_batch import normalize_batch

    rng = np.random.default_rng(7)
    for trial in range(400):
        c, h, w = (int(v) for v in rng.integers(1, (6, 30, 30)))
        image = rng.integers(0, 256, (h, w, c), dtype=np.uint8)
        ch, cw = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
        y, x = [(0, w - cw), (h - ch, 0), (int(rng.integers(0, h - ch + 1)),
                                           int(rng.integers(0, w - cw + 1)))][trial % 3]
        view = image[y:y + ch, x:x + cw]
        view = view[:, ::-1] if trial % 2 else view
        mean = list(rng.uniform(-300, 300, 1 if trial % 5 == 0 else c))
        std = list(rng.uniform(0.001, 300, 1 if trial % 7 == 0 else c))
        scale, shift = float(rng.uniform(-1000, 1000)), float(rng.uniform(-500, 500))
        dtype, chw, pad = (np.float32, np.float16)[trial % 2], trial % 4 < 2, trial % 3 == 0
        mul, add = folded_coefficients(per_channel("cmn", "mean", mean, c),
                                       per_channel("cmn", "std", std, c), scale, shift)
        channels = next_pow2(c) if pad else c
        server = normalize(view, mul, add, np.dtype(dtype), chw=chw, channels_out=channels)
        batch = normalize_batch([view, view], mul, add, np.dtype(dtype), chw=chw,
                                channels_out=channels)
        pixels = torch.from_numpy(view.copy())
        for got, sent in ((pixels, server), (torch.stack([pixels, pixels]), batch)):
            mine = crop_mirror_normalize(got, mean=mean, std=std, scale=scale, shift=shift,
                                         dtype=torch.float16 if dtype == np.float16 else None,
                                         output_layout="CHW" if chw else "HWC",
                                         pad_output=pad).numpy()
            assert (mine.dtype, mine.shape) == (sent.dtype, sent.shape), trial
            assert mine.tobytes() == sent.tobytes(), trial
