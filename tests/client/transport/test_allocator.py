"""The allocator settings: with them, a receiver's megabyte buffers stop faulting in afresh
for every batch; without them (or with CONVEYOR_TUNE_MALLOC=0) they do."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")

# A receiver's pattern per batch: three 1 MiB frames from gRPC, copied into one batch buffer.
# Prints the minor page faults per page touched, over 20 batches after two warm-up batches.
PATTERN = """
import resource, sys
import numpy as np
from conveyor.transport import allocator
if sys.argv[1] == "tune":
    assert allocator.tune_malloc(allocator.DEFAULT)
elif sys.argv[1] == "client":
    allocator.tune_client_process()

def batch():
    frames = [bytes(1 << 20) for _ in range(3)]
    buffer = np.empty(3 << 20, np.uint8)
    for i, frame in enumerate(frames):
        buffer[i << 20:(i + 1) << 20] = np.frombuffer(frame, np.uint8)
    return buffer

batch(); batch()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    batch()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / (20 * 6 * 256))
"""


def faults_per_page(mode: str, **env: str) -> float:
    out = subprocess.run([sys.executable, "-c", PATTERN, mode], capture_output=True,
                         text=True, check=True, env={**os.environ, **env})
    return float(out.stdout)


def test_tuned_buffers_are_reused_without_faulting() -> None:
    assert faults_per_page("default") > 0.5  # glibc's defaults: nearly every page, every batch
    assert faults_per_page("tune") < 0.05


def test_the_client_tunes_unless_told_not_to() -> None:
    assert faults_per_page("client") < 0.05
    assert faults_per_page("client", CONVEYOR_TUNE_MALLOC="0") > 0.5
