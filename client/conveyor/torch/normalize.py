"""``crop_mirror_normalize`` on the trainer: the server sends the cropped (and mirrored)
pixels as uint8 and the trainer normalises them where it trains, on its GPU or CPU.

The wire then carries one byte per value instead of four (float32) or two (float16). The
arithmetic is the server operator's (``conveyor.definition.normalization``): on the CPU in float32
the result is bit for bit what the server's ``crop_mirror_normalize`` would have sent.
Crop and mirror stay on the server, where their random draws are keyed; this helper takes
their output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from conveyor.definition.normalization import folded_coefficients, next_pow2
from conveyor.errors import InvalidArgument

LAYOUTS = ("CHW", "HWC")


def crop_mirror_normalize(images: Any, *, mean: Sequence[float], std: Sequence[float],
                          scale: float = 1.0, shift: float = 0.0, dtype: Any = None,
                          output_layout: str = "CHW", pad_output: bool = False) -> Any:
    """Normalise ``images``, a torch tensor of one image (HWC) or a batch (NHWC), as the
    server's ``crop_mirror_normalize`` with these arguments would: per channel
    ``(x - mean) / std * scale + shift``, to ``dtype`` (``torch.float32`` by default, or
    ``torch.float16``), laid out ``CHW`` (NCHW for a batch) or ``HWC``, with channels
    padded by zeros to a power of two if ``pad_output``. The result is on the input's
    device."""
    import torch

    out_dtype = torch.float32 if dtype is None else dtype
    if out_dtype not in (torch.float32, torch.float16):
        raise InvalidArgument(f"crop_mirror_normalize: dtype {out_dtype} is not supported "
                              "here (float32 or float16)")
    if output_layout not in LAYOUTS:
        raise InvalidArgument(f"crop_mirror_normalize: output_layout {output_layout!r} is "
                              f"not one of {', '.join(LAYOUTS)}")
    if images.dim() not in (3, 4):
        raise InvalidArgument(f"crop_mirror_normalize: images of shape {tuple(images.shape)}:"
                              " expected HWC or NHWC")
    channels = int(images.shape[-1])
    if any(s == 0 for s in std):
        raise InvalidArgument(f"crop_mirror_normalize: std {list(std)}: values must be "
                              "non-zero (as the server's operator requires)")
    mul, add = folded_coefficients(_per_channel("mean", mean, channels),
                                   _per_channel("std", std, channels), scale, shift)
    device = images.device
    # Two float32 operations, each rounded, as the server computes them: no fused
    # multiply-add (torch.addcmul would round once).
    work = images.to(torch.float32) * torch.from_numpy(mul).to(device)
    work = work + torch.from_numpy(add).to(device)
    if pad_output and next_pow2(channels) > channels:
        pad = next_pow2(channels) - channels
        work = torch.nn.functional.pad(work, (0, pad))
    if out_dtype != torch.float32:
        work = work.to(out_dtype)
    if output_layout == "CHW":
        work = work.movedim(-1, -3)
    return work.contiguous()


def _per_channel(name: str, values: Sequence[float], channels: int) -> np.ndarray:
    if not values:
        raise InvalidArgument(f"crop_mirror_normalize: {name} has no values")
    if len(values) == 1:
        return np.full(channels, values[0], dtype=np.float64)
    if len(values) != channels:
        raise InvalidArgument(f"crop_mirror_normalize: {name} has {len(values)} values but "
                              f"the images have {channels} channels")
    return np.asarray(values, dtype=np.float64)
