"""The ResNet-50 training pipeline: read -> decode a random window -> resize to 224x224 ->
crop_mirror_normalize to float16 or float32 CHW with a coin-flip mirror, 2 threads,
batches of 64.

Contenders (images/s):
- conveyor in-process: ``conveyor_server.Pipeline``, to float16 and to float32 (DALI's
  default type)
- conveyor over gRPC: a real conveyor-server on loopback, consumed by ``conveyor.Client``
  as float16 batches (client and server share the cores)
- hand-written loop: what an engineer would write over the libraries Conveyor uses, as
  tight as it gets without tricks: read bytes -> simplejpeg decode (RGB) -> the random
  window (numpy's generator, DALI's rule) cut out -> cv2.resize to 224x224 (INTER_AREA
  when both sides shrink, as our antialiased resize does; INTER_LINEAR otherwise) ->
  cv2.flip on heads -> numpy ``(x - mean) / std`` as one float32 multiply-add written into
  the batch's float16 CHW array; a thread pool of 2, OpenCV's own threads off
- NVIDIA DALI on the CPU (``device_id=None``): ``fn.decoders.image_random_crop(device=
  "cpu")``, ``fn.resize``, ``fn.crop_mirror_normalize(dtype=FLOAT16 or FLOAT)`` with
  ``fn.random.coin_flip()``, the same ``num_threads`` and prefetch depth
- torchvision's ``DataLoader``, as a PyTorch user writes it: PIL decode, ``RandomResizedCrop
  (224)``, ``RandomHorizontalFlip()``, ``ToTensor()``, ``Normalize(mean, std)`` (float32
  CHW), 2 worker processes, batches of 64; its CPU counts the workers' too.

DALI and torchvision are not dependencies of Conveyor: ``make bench-resnet50`` installs
them into ``.bench-venv`` and runs this script there; elsewhere their rows say they are
absent.

Every contender reads the same JPEGs (``bench._shared.make_dataset``: textured images
around 470x405, about ImageNet's typical size, at quality 90), with the window arguments
of DALI's defaults (area 0.08-1, aspect ratio 3/4-4/3, 10 attempts) and ImageNet's mean
and std. Each run builds its contender afresh, warms it up with 2 batches, times a fixed
number of batches and shuts it down; contenders alternate (A B C D, D C B A, ...), and each
figure is the median over runs, each ratio the median of per-run ratios.

Targets: in-process >= 4 x DALI on the CPU (images/s) and >= 0.9 x the hand-written loop;
for float16 and float32 alike, in-process >= 1.4 x less CPU per image than DALI on the CPU
to the same type, and >= 2 x torchvision's images/s.

Run: python -m bench.resnet50 [--quick] [--runs N] [--batches N] [--data DIR]
(or make bench-resnet50 BENCH_ARGS="--quick")
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
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
    process_cpu_s,
    ratio,
    spread,
    table,
)
from conveyor import fn, pipeline_def, types
from conveyor.transport.allocator import DEFAULT, tune_malloc
from conveyor_server import Pipeline

THREADS = 2
BATCH = 64
SIZE = 224
IMAGES = 512
MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]
AREA, RATIO, ATTEMPTS = (0.08, 1.0), (3 / 4, 4 / 3), 10
OURS, OURS32 = "conveyor in-process, float16", "conveyor in-process, float32"
GRPC, HAND = "conveyor over gRPC, float16 to the client", "hand-written loop, float16"
DALI, DALI32 = "DALI 2.4 on the CPU, float16", "DALI 2.4 on the CPU, float32"
TORCH = "torchvision DataLoader, float32"
HOWTO = ("make bench-resnet50 installs nvidia-dali-cuda120 2.4.0, torch and torchvision into "
         ".bench-venv and runs this there")


@dataclass(frozen=True)
class Measure:
    """One timed run: images per second, and the CPU time per image of every process
    involved (this one, the server's for the gRPC contender, the workers' for
    torchvision's), all threads counted.
    CPU per image moves less than images/s when other work shares the cores."""

    rate: float
    cpu_ms: float


def measured(step: Callable[[], object], batches: int, pids: Sequence[int] = (),
             warmup: int = 2) -> Measure:
    """``step`` (one batch) ``warmup`` times untimed, then ``batches`` times timed; the CPU
    of this process and of ``pids``."""
    for _ in range(warmup):
        step()
    cpu = process_cpu_s() + sum(process_cpu_s(pid) for pid in pids)
    start = time.perf_counter()
    for _ in range(batches):
        step()
    wall = time.perf_counter() - start
    cpu = process_cpu_s() + sum(process_cpu_s(pid) for pid in pids) - cpu
    images = batches * BATCH
    return Measure(images / wall, cpu / images * 1e3)


def resnet50_pipeline(root: str, dtype: Any = types.FLOAT16) -> Any:
    @pipeline_def(batch_size=BATCH, num_threads=THREADS, prefetch_queue_depth=2, seed=12,
                  enable_checkpointing=True)
    def resnet50() -> Any:
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="reader")
        images = fn.decoders.image_random_crop(jpegs, output_type=types.RGB,
                                               random_area=AREA, random_aspect_ratio=RATIO,
                                               num_attempts=ATTEMPTS)
        images = fn.resize(images, size=(SIZE, SIZE))
        images = fn.crop_mirror_normalize(images, dtype=dtype, output_layout="CHW",
                                          mean=MEAN, std=STD, mirror=fn.random.coin_flip())
        return images, labels

    return resnet50()


def in_process(root: str, batches: int, dtype: Any = types.FLOAT16) -> Callable[[], Measure]:
    def run() -> Measure:
        with Pipeline(resnet50_pipeline(root, dtype)) as pipe:
            return measured(pipe.run, batches)
    return run


def streamed(server: Server, root: str, batches: int) -> Callable[[], Measure]:
    names = itertools.count()

    def run() -> Measure:
        with conveyor.Client(server.address, timeout=60) as client:
            name = f"rn50-{next(names)}"
            pipe = client.create(name, resnet50_pipeline(root))
            try:
                def step() -> None:
                    images, _ = pipe.run()
                    images.as_array()  # float16 (64, 3, 224, 224), as a trainer takes it
                return measured(step, batches, (server.pid,))
            finally:
                pipe.close()
                client.delete(name)
    return run


def random_window(rng: np.random.Generator, h: int, w: int) -> tuple[int, int, int, int]:
    """(y, x, height, width): DALI's random crop rule, drawn from numpy's generator."""
    for _ in range(ATTEMPTS):
        area = rng.uniform(*AREA) * h * w
        aspect = math.exp(rng.uniform(math.log(RATIO[0]), math.log(RATIO[1])))
        cw, ch = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
        if 0 < cw <= w and 0 < ch <= h:
            return int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1)), ch, cw
    side = min(h, w)
    return (h - side) // 2, (w - side) // 2, side, side


def hand_written(files: list[str], batches: int) -> Callable[[], Measure]:
    mul = (1.0 / np.asarray(STD, np.float32)).astype(np.float32)
    add = (-np.asarray(MEAN, np.float32) * mul).astype(np.float32)

    def one(path: str, seed: int, out: np.ndarray) -> None:
        with open(path, "rb") as f:
            img = simplejpeg.decode_jpeg(f.read(), colorspace="RGB")
        rng = np.random.default_rng(seed)
        y, x, h, w = random_window(rng, img.shape[0], img.shape[1])
        interp = cv2.INTER_AREA if h >= SIZE and w >= SIZE else cv2.INTER_LINEAR
        img = cv2.resize(img[y:y + h, x:x + w], (SIZE, SIZE), interpolation=interp)
        if rng.integers(0, 2):
            img = cv2.flip(img, 1)
        work = img.astype(np.float32)
        work *= mul
        work += add
        out[...] = work.transpose(2, 0, 1)  # to float16, CHW

    def run() -> Measure:
        cv2.setNumThreads(1)  # parallel across images, as the engine does
        order = np.random.default_rng(0).permutation(len(files))
        cursor = itertools.count()
        with ThreadPoolExecutor(THREADS) as pool:
            def step() -> np.ndarray:
                out = np.empty((BATCH, 3, SIZE, SIZE), np.float16)
                picks = [next(cursor) for _ in range(BATCH)]
                list(pool.map(one, [files[order[i % len(files)]] for i in picks], picks,
                              list(out)))
                return out
            return measured(step, batches)
    return run


def dali(root: str, batches: int, dtype: str = "FLOAT16") -> Callable[[], Measure] | str:
    """DALI's contender to ``dtype`` (a DALIDataType name), or why there is none."""
    try:
        from nvidia.dali import fn as dfn
        from nvidia.dali import pipeline_def as dali_pipeline_def
        from nvidia.dali import types as dtypes
    except Exception as exc:  # ImportError, or a broken install
        return f"DALI is absent from this environment ({type(exc).__name__}: {exc})"

    @dali_pipeline_def(batch_size=BATCH, num_threads=THREADS, device_id=None, seed=12,
                       prefetch_queue_depth=2)
    def dali_resnet50() -> Any:
        jpegs, labels = dfn.readers.file(file_root=root, random_shuffle=True, name="reader")
        images = dfn.decoders.image_random_crop(jpegs, device="cpu", output_type=dtypes.RGB,
                                                random_area=list(AREA),
                                                random_aspect_ratio=list(RATIO),
                                                num_attempts=ATTEMPTS)
        images = dfn.resize(images, size=(SIZE, SIZE))
        images = dfn.crop_mirror_normalize(images, dtype=getattr(dtypes, dtype),
                                           output_layout="CHW",
                                           mean=MEAN, std=STD, mirror=dfn.random.coin_flip())
        return images, labels

    def run() -> Measure:
        pipe = dali_resnet50()
        pipe.build()
        try:
            return measured(pipe.run, batches)
        finally:
            del pipe
    return run


def _declare_torchvision_detection_ops(torch: Any) -> None:
    """Let torchvision import beside torch's CPU build. The torchvision on PyPI is built
    against torch's CUDA build, so its C extension (detection operators and image codecs,
    none of which this pipeline uses: PIL decodes, the transforms are Python and torch) does
    not load; torchvision's import then fails declaring fake kernels for two of those
    operators, ``nms`` and ``qnms``, unless their schemas exist. Where the extension does
    not load, they are declared here, as the extension would."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        return  # absent: the import that follows says so
    extension = next(Path(spec.origin).parent.glob("_C*.so"), None)
    try:
        if extension is not None:
            torch.ops.load_library(str(extension))
            return
    except OSError:
        pass
    lib = torch.library.Library("torchvision", "FRAGMENT")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _KEEP.append(lib)  # a Library's definitions last as long as the object


_KEEP: list[Any] = []


def torchvision_loader(files: list[str], batches: int) -> Callable[[], Measure] | str:
    """torchvision's contender, or why there is none."""
    try:
        import torch
        from PIL import Image
        from torch.utils.data import DataLoader, Dataset
        _declare_torchvision_detection_ops(torch)
        from torchvision import transforms
    except Exception as exc:  # ImportError, or a broken install
        return f"torchvision is absent from this environment ({type(exc).__name__}: {exc})"

    transform = transforms.Compose([
        transforms.RandomResizedCrop(SIZE), transforms.RandomHorizontalFlip(),
        transforms.ToTensor(), transforms.Normalize([m / 255 for m in MEAN],
                                                    [s / 255 for s in STD])])

    class Folder(Dataset[tuple[Any, int]]):
        def __len__(self) -> int:
            return len(files)

        def __getitem__(self, i: int) -> tuple[Any, int]:
            with Image.open(files[i]) as img:
                return transform(img.convert("RGB")), i % 4

    def run() -> Measure:
        torch.manual_seed(12)
        loader = DataLoader(Folder(), batch_size=BATCH, shuffle=True, num_workers=THREADS,
                            prefetch_factor=2, drop_last=True, persistent_workers=True)
        it = iter(loader)
        try:
            pids = [w.pid for w in it._workers]

            def step() -> None:
                nonlocal it
                try:
                    images, _ = next(it)
                except StopIteration:  # a new epoch, on the same worker processes
                    it = iter(loader)
                    images, _ = next(it)
                assert images.shape == (BATCH, 3, SIZE, SIZE)
            return measured(step, batches, pids)
        finally:
            it._shutdown_workers()
    return run


def check_same_batches(server: Server, root: str) -> None:
    """Both Conveyor contenders compute the same stream: the first batches' bytes agree."""
    with Pipeline(resnet50_pipeline(root)) as local, \
            conveyor.Client(server.address, timeout=60) as client:
        remote = client.create("rn50-check", resnet50_pipeline(root))
        try:
            for _ in range(2):
                (images, labels), (r_images, r_labels) = local.run(), remote.run()
                ours, theirs = images.as_array(), r_images.as_array()
                assert ours.dtype == np.float16 and ours.shape == (BATCH, 3, SIZE, SIZE)
                assert ours.tobytes() == theirs.tobytes(), "gRPC and in-process batches differ"
                assert labels.as_array().tobytes() == r_labels.as_array().tobytes()
        finally:
            remote.close()
            client.delete("rn50-check")
    print("in process and over gRPC: the same float16 batches, byte for byte (2 checked)\n")


def main() -> None:
    def batches_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--batches", type=int, default=None,
                       help="batches timed per run (default 12; 3 with --quick)")

    args = parse_args(__doc__.splitlines()[0], batches_arg)
    tune_malloc(DEFAULT)
    count = 256 if args.quick else IMAGES
    data = make_dataset(args.data, count)
    root = str(data)
    files = image_files(data)
    batches = args.batches or (3 if args.quick else 12)
    print(f"# ResNet-50 training pipeline ({machine()})\n# {len(files)} JPEGs, batches of "
          f"{BATCH}, {THREADS} threads, median of {args.runs} interleaved runs (min-max), "
          f"{batches * BATCH} images timed per run\n")
    with Server(args.data) as server:
        check_same_batches(server, root)
        contenders: dict[str, Callable[[], Measure]] = {
            OURS: in_process(root, batches),
            OURS32: in_process(root, batches, types.FLOAT),
            GRPC: streamed(server, root, batches),
            HAND: hand_written(files, batches),
        }
        absent = []
        peers = {DALI: dali(root, batches), DALI32: dali(root, batches, "FLOAT"),
                 TORCH: torchvision_loader(files, batches)}
        for name, peer in peers.items():
            if isinstance(peer, str):
                absent.append(f"{name}: not measured. {peer}")
            else:
                contenders[name] = peer
        results = interleaved(contenders, args.runs)
    rates = {name: [m.rate for m in runs] for name, runs in results.items()}
    cpu = {name: [m.cpu_ms for m in runs] for name, runs in results.items()}
    table([(name, f"{median(rates[name]):,.0f}", spread(rates[name], "{:,.0f}"),
            f"{median(cpu[name]):.2f}", spread(cpu[name], "{:.2f}")) for name in results],
          ("contender", "images/s", "spread", "CPU ms/image", "spread"))
    if absent:
        print("\n".join(absent) + f"\n({HOWTO})\n")
    rows = [(f"{OURS} / {HAND} (target >= 0.9)", ratio(rates[OURS], rates[HAND]),
             ratio(cpu[HAND], cpu[OURS])),
            (f"{OURS32} / {OURS}", ratio(rates[OURS32], rates[OURS]),
             ratio(cpu[OURS], cpu[OURS32])),
            (f"{GRPC} / {OURS}", ratio(rates[GRPC], rates[OURS]), ratio(cpu[OURS], cpu[GRPC]))]
    for ours, theirs in ((OURS, DALI), (OURS32, DALI32)):
        if theirs in results:
            rows.append((f"{ours} / {theirs} (targets: >= 4, CPU >= 1.4)",
                         ratio(rates[ours], rates[theirs]), ratio(cpu[theirs], cpu[ours])))
    if DALI in results:
        for name in (GRPC, HAND):
            rows.append((f"{name} / {DALI}", ratio(rates[name], rates[DALI]),
                         ratio(cpu[DALI], cpu[name])))
    if TORCH in results:
        for name in (OURS, OURS32):
            rows.append((f"{name} / {TORCH} (target >= 2)", ratio(rates[name], rates[TORCH]),
                         ratio(cpu[TORCH], cpu[name])))
    table(rows, ("ratio (median of per-run ratios, spread)", "images/s",
           "CPU ms/image, inverted: theirs / ours"))
    sys.stdout.flush()

if __name__ == "__main__":
    main()
