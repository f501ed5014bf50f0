"""The decoders' own pixel caps, lowered to the server's ``limits.max_image_pixels``.

The engine refuses an image from its header before decoding it, in the formats its header
parser reads (``engine/ops/decode/image_header.py``). OpenCV decodes more (Radiance HDR, Sun raster,
AVIF, JPEG 2000, ...); its own check, made from the header before it allocates, is the
guard for those. OpenCV reads that cap from ``OPENCV_IO_MAX_IMAGE_PIXELS`` once, when the
library loads (its default is 2^30 pixels), so the server sets the variable before anything
imports ``cv2``: ``main`` calls ``cap_decoders`` first and imports the engine after. Pillow
is not a decoder of the server (it is a test dependency only), so it has no cap to set.
"""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger("conveyor.server")

OPENCV_PIXELS = "OPENCV_IO_MAX_IMAGE_PIXELS"


def cap_decoders(max_image_pixels: int, environ: dict[str, str] | None = None) -> bool:
    """Set OpenCV's pixel cap to ``max_image_pixels`` for this process (and the processes it
    starts). False, with a warning, where ``cv2`` was imported already: then its cap stays
    what it was, and only the engine's header check and the check after decoding apply."""
    env = os.environ if environ is None else environ
    env[OPENCV_PIXELS] = str(max_image_pixels)
    if "cv2" in sys.modules:
        log.warning("OpenCV was loaded before its pixel cap could be set: it keeps its own "
                    "cap, not limits.max_image_pixels = %d", max_image_pixels)
        return False
    return True
