"""The one save/restore property, reused for every reader configuration and operator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from conveyor.definition.spec import Definition
from conveyor.tensor_list import TensorList
from conveyor_server import Pipeline

Batch = tuple[TensorList, ...]


def batch_bytes(batch: Batch) -> list[list[tuple[str, tuple[int, ...], bytes]]]:
    """Every sample of every output as (dtype, shape, bytes): equal means byte-identical.
    Device samples (CuPy arrays) are copied to the host first."""
    arrays = [[np.asarray(s.get() if hasattr(s, "get") else s) for s in out]
              for out in batch]  # (DALI's TensorCPU samples too, through __array__)
    return [[(str(a.dtype), a.shape, np.ascontiguousarray(a).tobytes()) for a in out]
            for out in arrays]


def run_batches(pipe: Pipeline, count: int) -> list[Batch]:
    return [pipe.run() for _ in range(count)]


def run_across_epochs(pipe: Any, count: int) -> list[Batch]:
    """``count`` batches of a ``RemotePipeline`` (or an in-process ``Pipeline``), going on
    where an external source's epoch ends (StopIteration, then ``reset()``): the sequence
    the engine gives without stopping."""
    out: list[Batch] = []
    while len(out) < count:
        try:
            out.append(pipe.run())
        except StopIteration:
            pipe.reset()
            out.append(pipe.run())  # the next epoch's first batch (a second stop: an error)
    return out


def assert_same_stream(a: Sequence[Batch], b: Sequence[Batch], label: str = "") -> None:
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        assert batch_bytes(x) == batch_bytes(y), f"{label}: batch {i} differs"


def assert_resume_exact(spec: Definition, before: int, after: int) -> bytes:
    """Run ``before`` batches, checkpoint, run ``after`` more; a fresh pipeline restored
    from the blob must give the same ``after`` batches, byte for byte. Returns the blob."""
    with Pipeline(spec) as pipe:
        run_batches(pipe, before)
        blob = pipe.checkpoint()
        expected = run_batches(pipe, after)
    with Pipeline(spec, checkpoint=blob) as restored:
        got = run_batches(restored, after)
    assert_same_stream(expected, got, f"resume after {before} batches")
    return blob


def reference(spec: Any, upto: int) -> list[Any]:
    with Pipeline(spec) as local:
        return [batch_bytes(b) for b in run_batches(local, upto)]
