"""Pipeline throughput: the seed-notebook pipeline plus a 224x224 resize, 2 threads.

Contenders (images/s, batch 8 and 64):
- conveyor in-process: ``conveyor_server.Pipeline``
- conveyor over gRPC: a real conveyor-server on loopback, consumed by ``conveyor.Client``
  (client and server share the 2 cores)
- hand-written loop: read bytes -> simplejpeg decode (RGB) -> cv2.warpAffine through
  RGBA (OpenCV's linear warp is ~2x faster on 4 channels, same bytes: the engine does the
  same) -> cv2.resize (INTER_AREA: the same antialiased shrink our resize does by default,
  as DALI's does), a thread pool of 2 with OpenCV's own threads off, batch by batch: the
  practical limit over the same libraries
- NVIDIA DALI on the CPU (``device_id=None``), if ``nvidia.dali`` imports
  (``pip install nvidia-dali-cuda120``: the wheel runs on a machine without a GPU). Its CPU
  ``rotate`` is its bottleneck here: on the 2-core machine (DALI 2.4, quiet), decode alone
  ran at ~1,600 images/s, decode + rotate at ~230 and decode + resize at ~600, so that
  ratio mostly measures DALI's CPU warp.
- a PyTorch DataLoader with 2 worker processes and PIL (rotate bilinear, resize bilinear,
  which PIL antialiases), if ``torch`` imports (``pip install torch==2.13.0 pillow``)

The benchmark process runs with the allocator settings the client applies when it opens a
stream (``conveyor.transport.allocator``), set once at the start, so every contender in it runs with
the same malloc.

Each run builds its contender afresh, warms it up with 2 batches, times a fixed number of
batches and shuts it down (so no contender computes ahead while another one is timed).

Run: python -m bench.throughput [--quick] [--runs N] [--data DIR]
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import cv2
import numpy as np
import simplejpeg

import conveyor
from bench._shared import (
    Server,
    image_files,
    interleaved,
    machine,
    make_dataset,
    median,
    parse_args,
    ratio,
    spread,
    table,
    timed,
)
from conveyor import fn, pipeline_def, types
from conveyor.transport.allocator import DEFAULT, tune_malloc
from conveyor_server import Pipeline

THREADS = 2


def seed_pipeline(root: str, batch: int) -> Any:
    @pipeline_def(batch_size=batch, num_threads=THREADS, seed=12, enable_checkpointing=True)
    def seed_resize() -> Any:
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="reader")
        images = fn.decoders.image(jpegs, output_type=types.RGB)
        angles = fn.random.uniform(range=(-30.0, 30.0))
        images = fn.rotate(images, angle=angles, fill_value=0, keep_size=True)
        return fn.resize(images, size=(224, 224)), labels, angles

    return seed_resize()


def in_process(root: str, batch: int, batches: int) -> Callable[[], float]:
    def run() -> float:
        with Pipeline(seed_pipeline(root, batch)) as pipe:
            return timed(pipe.run, batches, batch)
    return run


def streamed(server: Server, root: str, batch: int, batches: int) -> Callable[[], float]:
    names = itertools.count()

    def run() -> float:
        with conveyor.Client(server.address, timeout=60) as client:
            name = f"tp-{batch}-{next(names)}"
            pipe = client.create(name, seed_pipeline(root, batch))
            try:
                return timed(pipe.run, batches, batch)
            finally:
                pipe.close()
                client.delete(name)
    return run


def hand_written(files: list[str], batch: int, batches: int) -> Callable[[], float]:
    rng = np.random.default_rng(0)

    def one(path: str, angle: float) -> np.ndarray:
        with open(path, "rb") as f:
            img = simplejpeg.decode_jpeg(f.read(), colorspace="RGB")
        h, w = img.shape[:2]
        m = cv2.getRotationMatrix2D((w / 2, h / 2), angle, 1.0)
        img = cv2.warpAffine(cv2.cvtColor(img, cv2.COLOR_RGB2RGBA), m, (w, h),
                             flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT,
                             borderValue=0)
        img = cv2.cvtColor(img, cv2.COLOR_RGBA2RGB)
        return cv2.resize(img, (224, 224), interpolation=cv2.INTER_AREA)

    def run() -> float:
        cv2.setNumThreads(1)  # parallel across images, as the engine does
        with ThreadPoolExecutor(THREADS) as pool:
            order = rng.permutation(len(files))
            cursor = itertools.count()

            def step() -> None:
                idx = [order[next(cursor) % len(files)] for _ in range(batch)]
                angles = rng.uniform(-30, 30, batch)
                list(pool.map(one, [files[i] for i in idx], angles))
            return timed(step, batches, batch)
    return run


PEERS = {"DALI CPU": "pip install nvidia-dali-cuda120",
         "PyTorch DataLoader+PIL": "pip install torch==2.13.0 pillow"}


def dali(root: str, batch: int, batches: int) -> Callable[[], float] | None:
    try:
        from nvidia.dali import fn as dfn
        from nvidia.dali import pipeline_def as dali_pipeline_def
        from nvidia.dali import types as dtypes
    except Exception:  # ImportError, or a broken install
        return None

    @dali_pipeline_def(batch_size=batch, num_threads=THREADS, device_id=None, seed=12)
    def dali_seed() -> Any:
        jpegs, labels = dfn.readers.file(file_root=root, random_shuffle=True)
        images = dfn.decoders.image(jpegs, device="cpu", output_type=dtypes.RGB)
        angles = dfn.random.uniform(range=(-30.0, 30.0))
        images = dfn.rotate(images, angle=angles, fill_value=0, keep_size=True)
        return dfn.resize(images, size=(224, 224)), labels, angles

    def run() -> float:
        pipe = dali_seed()
        pipe.build()
        try:
            return timed(pipe.run, batches, batch)
        finally:
            del pipe
    return run


def torch_loader(files: list[str], batch: int, batches: int) -> Callable[[], float] | None:
    try:
        import torch
        from PIL import Image
        from torch.utils.data import DataLoader, Dataset
    except Exception:  # ImportError, or a broken install
        return None

    class Images(Dataset):
        def __len__(self) -> int:
            return len(files)

        def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
            angle = float(np.random.default_rng(i).uniform(-30, 30))
            with Image.open(files[i]) as im:
                img = im.convert("RGB").rotate(angle, resample=Image.Resampling.BILINEAR,
                                               fillcolor=0)
                img = img.resize((224, 224), Image.Resampling.BILINEAR)
            return np.asarray(img), i % 4

    def collate(items: list[tuple[np.ndarray, int]]) -> tuple[Any, Any]:
        return torch.from_numpy(np.stack([x for x, _ in items])), [y for _, y in items]

    def run() -> float:
        loader = DataLoader(Images(), batch_size=batch, shuffle=True, num_workers=THREADS,
                            collate_fn=collate, persistent_workers=False)
        it = iter(loader)
        return timed(lambda: next(it), batches, batch)
    return run


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    tune_malloc(DEFAULT)
    data = make_dataset(args.data, args.images)
    root = str(data)
    files = image_files(data)
    images_per_run = 128 if args.quick else 768
    print(f"# Pipeline throughput ({machine()})\n# {len(files)} JPEGs, images/s, median of "
          f"{args.runs} interleaved runs (min-max), {images_per_run} images timed per run\n")
    results: dict[int, dict[str, list[float]]] = {}
    with Server(args.data) as server:
        for batch in (8, 64):
            batches = max(2, images_per_run // batch)
            contenders: dict[str, Callable[[], float]] = {
                "conveyor in-process": in_process(root, batch, batches),
                "conveyor over gRPC": streamed(server, root, batch, batches),
                "hand-written loop": hand_written(files, batch, batches),
            }
            skipped = []
            peers = {"DALI CPU": dali(root, batch, batches),
                     "PyTorch DataLoader+PIL": torch_loader(files, batch, batches)}
            for name, contender in peers.items():
                if contender is None:
                    skipped.append(name)
                else:
                    contenders[name] = contender
            results[batch] = interleaved(contenders, args.runs)
            print(f"batch {batch}:")
            table([(name, f"{median(v):.0f}", spread(v)) for name, v in results[batch].items()],
                  ("contender", "images/s", "spread"))
            for name in skipped:
                print(f"{name}: skipped: not installed ({PEERS[name]})\n")
    rows = []
    for batch in (8, 64):
        r = results[batch]
        ours = r["conveyor in-process"]
        rows.append((f"in-process / hand-written loop, batch {batch}",
                     ratio(ours, r["hand-written loop"])))
        rows.append((f"over gRPC / in-process, batch {batch}",
                     ratio(r["conveyor over gRPC"], ours)))
        for peer in PEERS:
            if peer in r:
                rows.append((f"in-process / {peer}, batch {batch}", ratio(ours, r[peer])))
    table(rows, ("ratio (per-run, median and spread)", "value"))


if __name__ == "__main__":
    main()
