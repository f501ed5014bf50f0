"""What the fan-in tests share: servers that can run the registered external sources,
the pipelines they read, and a trainer's client."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import conveyor
from conveyor import fn, pipeline_def, types
from conveyor_server.demo.run import rotate_pipeline
from tests.support.resume import batch_bytes
from tests.support.servers import DEADLINE, ServerProcess, Start

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("tests.support.external_sources:samples",)
#: 18 images in batches of 2: an epoch is 9 batches.
BATCH = 2


def source_env(**more: str) -> dict[str, str]:
    """A server environment where the tests' external sources may be named."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "CONVEYOR_EXTERNAL_SOURCES": ",".join(SOURCES), **more}


def fleet(start_server: Start, count: int, **kw: Any) -> list[ServerProcess]:
    return start_server.many(count, env=source_env(), **kw)


def rotating(image_root: Path) -> Any:
    """Shuffled file reader, decode, rotate by a random angle."""
    return rotate_pipeline(str(image_root / "imgs"), batch_size=BATCH)


@pipeline_def(batch_size=3, num_threads=2, seed=21, enable_checkpointing=True)
def sharded_with_source(root: str) -> Any:
    """A shuffled reader's second shard of two beside an external source whose epochs
    (10 and 14 samples) end inside batches."""
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, shard_id=1,
                                    num_shards=2)
    images = fn.decoders.image(jpegs, output_type=types.RGB)
    small = fn.resize(images, resize_x=16, resize_y=16)
    pixels, where = fn.external_source(source=SOURCES[0], batch=False, num_outputs=2,
                                       dtype=[types.UINT8, types.INT32], layout=["HWC", ""])
    flipped = fn.flip(pixels, horizontal=fn.random.coin_flip())
    return small, labels, flipped, where


def trainer(*servers: ServerProcess, **kw: Any) -> conveyor.Client:
    """A trainer's client of ``servers`` (its pipelines are created on the first)."""
    kw.setdefault("keepalive_s", 1)
    kw.setdefault("keepalive_timeout_s", 1)
    return conveyor.Client([s.address for s in servers], timeout=DEADLINE, place=False,
                           stream_timeout=120, **kw)


def read_on(pipe: Any, got: list[Any], count: int) -> float:
    """Append ``pipe``'s batches (``batch_bytes``) to ``got`` until it holds ``count``; the longest
    the trainer waited for one."""
    stall = 0.0
    while len(got) < count:
        started = time.monotonic()
        got.append(batch_bytes(pipe.run()))
        stall = max(stall, time.monotonic() - started)
    return stall
