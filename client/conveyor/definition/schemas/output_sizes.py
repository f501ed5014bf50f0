"""The operators' output-size rules: where an operator's constant arguments fix the shape
of its output (a crop window, a resize to a given size, a random draw's shape), the rule
gives it, so that a server refuses a spec whose outputs are over its limits before a byte
of them is allocated (``engine/admission/spec_bounds.py``). A schema names its rule
(``OpSchema.fixed_output``); an operator without one has outputs sized by its data.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class FixedOutput:
    """An output shape that an operator's constant arguments fix."""

    #: The argument that fixes it, for the field path.
    arg: str
    #: (height, width) of an image, or a random draw's shape.
    shape: tuple[int, ...]
    #: The fewest bytes one of its values takes (an image's channels are not known yet).
    itemsize: int
    image: bool


def pixels(x: float) -> int:
    """An extent argument as whole pixels, as the operators round it (at least 1)."""
    return max(1, math.floor(x + 0.5))


def random_draw(args: Mapping[str, Any], fed: Collection[str]) -> FixedOutput | None:
    """``random.*``: ``shape`` values of ``dtype`` per sample."""
    return FixedOutput("shape", tuple(int(d) for d in args["shape"]),
                       np.dtype(args["dtype"]).itemsize, image=False)


def crop_window(args: Mapping[str, Any], fed: Collection[str]) -> FixedOutput | None:
    """``crop``, ``crop_mirror_normalize``, ``decoders.image_crop``: the window
    ``crop`` (or ``crop_h`` x ``crop_w``), unless ``crop`` trims it to the image."""
    hw = args["crop"] or ((args["crop_h"], args["crop_w"]) if args["crop_h"] else None)
    if hw is None or args.get("out_of_bounds_policy") == "trim_to_shape":
        return None
    arg = "crop" if args["crop"] else "crop_h"
    itemsize = np.dtype(args["dtype"]).itemsize if "dtype" in args else 1
    return FixedOutput(arg, (max(1, int(hw[0])), max(1, int(hw[1]))), itemsize, image=True)


def sized(args: Mapping[str, Any], fed: Collection[str]) -> FixedOutput | None:
    """``random_resized_crop``, and ``rotate`` where it is given: ``size``."""
    size = args["size"]
    if size is None:
        return None
    return FixedOutput("size", (pixels(size[0]), pixels(size[-1])), 1, image=True)


def resize(args: Mapping[str, Any], fed: Collection[str]) -> FixedOutput | None:
    """``resize`` in modes default and stretch with both extents given as constants: that
    size, each extent clamped to ``max_size``."""
    if args["mode"] not in ("default", "stretch"):
        return None
    if args["size"] is not None:
        arg, h, w = "size", args["size"][0], args["size"][-1]  # one number: both
    elif "resize_x" not in fed and "resize_y" not in fed:
        arg, h, w = "resize_x", args["resize_y"], args["resize_x"]
    else:
        return None
    if not (h > 0 and w > 0):
        return None
    max_size = args["max_size"] or (0.0,)
    max_h, max_w = max_size[0], max_size[-1]
    h, w = min(h, max_h) if max_h > 0 else h, min(w, max_w) if max_w > 0 else w
    itemsize = 4 if args["dtype"] == "float32" else 1
    return FixedOutput(arg, (pixels(h), pixels(w)), itemsize, image=True)
