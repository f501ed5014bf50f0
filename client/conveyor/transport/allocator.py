"""Keep large buffers in the heap: glibc malloc settings for processes that stream batches.

Every batch passes through buffers of a megabyte or more: on the receiving side, the bytes
gRPC hands over for each frame and the batch buffer they are copied into. With glibc's
defaults, freeing such a buffer gives its memory back to the kernel (the heap is trimmed
past 2x the largest buffer seen, or the buffer was its own ``mmap``), so the next batch's
buffer faults in and zeroes every page again: on the 2-core benchmark machine, ~150 page
faults per MiB received and about 40 % of the receiving process's CPU. Raising the mmap
threshold and the trim threshold lets freed buffers be reused in place: the process keeps
up to ``trim_threshold`` bytes of freed memory per malloc arena instead of returning it.

That retention is the cost. The defaults here (32 MiB, 64 MiB) are the ceilings glibc's own
adaptive thresholds may climb to by themselves, so they bound nothing glibc could not reach
anyway; but they start there. glibc makes up to 8 arenas per core, each one used by the
threads that allocate in it: a server with many cores and many pipelines may want a lower
``allocator.trim_threshold_bytes`` (or ``allocator.tune: false``) to bound its RSS.

The server applies this at start (``allocator.tune`` in its configuration), the client
when it opens its first stream unless ``CONVEYOR_TUNE_MALLOC=0``. Only glibc has these
``mallopt`` parameters; elsewhere (musl, macOS) nothing changes.
"""

from __future__ import annotations

import ctypes
import logging
import os
from dataclasses import dataclass

log = logging.getLogger("conveyor")

# mallopt parameter numbers from glibc's <malloc.h>.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3


#: Environment variable that keeps the client from changing the allocator when set to 0.
ENV_SWITCH = "CONVEYOR_TUNE_MALLOC"


@dataclass(frozen=True)
class AllocatorSettings:
    #: Allocations at least this large get their own mmap (glibc's cap is 32 MiB).
    mmap_threshold: int
    #: Freed memory at the top of the heap kept for reuse, per arena.
    trim_threshold: int


#: Buffers up to 32 MiB (glibc's cap) come from the heap; 64 MiB of freed memory is kept.
DEFAULT = AllocatorSettings(mmap_threshold=32 << 20, trim_threshold=64 << 20)
_client_done = False


def tune_malloc(settings: AllocatorSettings) -> bool:
    """Apply ``settings`` with glibc's ``mallopt``; False (and a debug line) where the C
    library is not glibc or refuses a value."""
    try:
        # The symbols the process already has (no library search, which on Linux would
        # run ldconfig in a subprocess).
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018 - present in glibc only
    except (OSError, AttributeError, TypeError):
        log.debug("allocator settings skipped: the C library is not glibc")
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    applied = (mallopt(M_MMAP_THRESHOLD, settings.mmap_threshold) == 1
               and mallopt(M_TRIM_THRESHOLD, settings.trim_threshold) == 1)
    if not applied:
        log.warning("glibc refused the allocator settings %s", settings)
    return applied


def tune_client_process() -> None:
    """Once per process, when a client opens its first stream: ``DEFAULT``, unless the
    environment says ``CONVEYOR_TUNE_MALLOC=0``."""
    global _client_done
    if _client_done:
        return
    _client_done = True
    if os.environ.get(ENV_SWITCH, "1").strip().lower() in ("0", "false", "no", "off"):
        return
    tune_malloc(DEFAULT)
