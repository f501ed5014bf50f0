"""Fan-in: one trainer fed by several servers (``Client.open(..., workers=k)``).

- scaling on real cores: a CPU-heavy pipeline (decode, rotate, resize to 224) read by one
  trainer from 1 server pinned to one core (its stream, ``workers=1``) against 2 servers
  pinned to two cores (``workers=2``), each server with one worker thread (``--cores``,
  default 0 and 1). Where the machine has other cores, the trainer is pinned to those;
  on a 2-core machine it shares the servers' cores.
- mechanism scaling: 1, 2, 4 and 8 servers computing a pipeline whose cost is a fixed wait
  per batch (an external source that sleeps, on the server's submitting thread, so one
  server computes one batch at a time); the trainer's own limit is measured on the same
  pipeline with the wait set to 0.
- trainer cost: the trainer's CPU per received 224x224x3 float16 image (about 300 KB), from
  1 server's stream, a fan-in of 1 and a fan-in of 4, each with the batch bytes in gRPC
  frames and on data channels (``conveyor/transport/data_channel.py``), interleaved.
- random access: seek + run of one batch at arbitrary indices in the engine, against
  running in order, for the shuffled file reader and an external source.
- tail: the longest wait for one batch when one of 3 workers is killed (-9), and when one
  is stopped (SIGSTOP; the hedge takes over), beside the usual wait.

Run: python -m bench.fleet [--quick] [--only cores --only mechanism] [--cores 2,3]
(from the repository root, in the venv ``make .venv/.installed-test`` makes; it starts
its own Redis and servers). It ends with the ratios: 2 pinned servers over 1 (the target
is 1.6 or more), and k servers over k x 1 in the mechanism's scaling.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np

import conveyor
from bench._shared import (
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
from conveyor.definition.external_source import SampleInfo
from conveyor.transport.channel import wait_serving
from conveyor_server.demo.launch import spawn_server, stop_server
from conveyor_server.engine.pipeline import Pipeline
from conveyor_server.store.redis_process import RedisProcess

REPO = Path(__file__).resolve().parents[1]
SLEEPY = "bench.fleet:sleepy"
FLAT = "bench.fleet:flat"
#: The wait of the sleepy source per sample, in milliseconds, and its batch size.
WAIT_MS = float(os.environ.get("CONVEYOR_BENCH_WAIT_MS", "2.5"))
SLEEPY_BATCH = 8
FLAT_BATCH = 16
_FLAT = np.full((224, 224, 3), 0.5, dtype=np.float16)


def sleepy(info: SampleInfo) -> np.ndarray:
    """A sample that takes ``WAIT_MS`` to make (the servers' environment sets it)."""
    time.sleep(WAIT_MS / 1000)
    return np.array([info.epoch_idx, info.idx_in_epoch], dtype=np.int64)


def flat(info: SampleInfo) -> np.ndarray:
    """A 224x224x3 float16 image, made at no cost."""
    return _FLAT


@pipeline_def(batch_size=8, num_threads=1, seed=3, enable_checkpointing=True,
              prefetch_queue_depth=2)
def heavy(root: str) -> Any:
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
    images = fn.decoders.image(jpegs, output_type=types.RGB)
    rotated = fn.rotate(images, angle=fn.random.uniform(range=(-30.0, 30.0)), fill_value=0)
    return fn.resize(rotated, resize_x=224, resize_y=224), labels


@pipeline_def(batch_size=SLEEPY_BATCH, num_threads=1, seed=3, enable_checkpointing=True)
def waiting() -> Any:
    return fn.external_source(source=SLEEPY, batch=False, dtype=types.INT64)


@pipeline_def(batch_size=FLAT_BATCH, num_threads=1, seed=3, enable_checkpointing=True)
def images_f16() -> Any:
    return fn.external_source(source=FLAT, batch=False, dtype=types.FLOAT16, layout="HWC")


class Fleet:
    """Servers sharing one private Redis, each optionally pinned to a core."""

    def __init__(self, data_root: Path, log_dir: Path) -> None:
        self.redis = RedisProcess(appendonly=False).start()
        self.data_root = data_root
        self.log_dir = log_dir
        self.servers: list[tuple[subprocess.Popen[str], str]] = []

    def start(self, core: int | None = None, wait_ms: float = WAIT_MS) -> str:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get(
            "PYTHONPATH", "")]), CONVEYOR_EXTERNAL_SOURCES=f"{SLEEPY},{FLAT}",
            CONVEYOR_LIMITS_WORKER_THREADS="1", CONVEYOR_BENCH_WAIT_MS=str(wait_ms))
        args = ["--host", "127.0.0.1", "--port", "0", "--redis-url", self.redis.url,
                "--data-root", str(self.data_root), "--log-level", "WARNING"]
        log = (self.log_dir / f"server-{len(self.servers)}.log").open("w")
        proc, address = spawn_server(args, stderr=log, env=env)
        if core is not None:
            subprocess.run(["taskset", "-a", "-p", "-c", str(core), str(proc.pid)],
                           check=True, capture_output=True)
        wait_serving(address)
        self.servers.append((proc, address))
        return address

    def pid(self, address: str) -> int:
        return next(p.pid for p, a in self.servers if a == address)

    def close(self) -> None:
        for proc, _ in self.servers:
            with suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
            stop_server(proc, 10)
        self.redis.cleanup()


@contextmanager
def fleet(data_root: Path, log_dir: Path) -> Iterator[Fleet]:
    f = Fleet(data_root, log_dir)
    try:
        yield f
    finally:
        f.close()


def client(*addresses: str, data_channel: bool = True) -> conveyor.Client:
    return conveyor.Client(list(addresses), place=False, timeout=30, keepalive_s=1,
                           keepalive_timeout_s=1, data_channel=data_channel)


_names = iter(range(1_000_000))


def rate(addresses: list[str], spec: Any, workers: int | str, batches: int,
         batch: int, data_channel: bool = True) -> tuple[float, float]:
    """Items per second and the trainer's CPU seconds per item, over ``batches`` after a
    warm-up, from a fresh pipeline held by the first address (``data_channel``: the batch
    bytes on data channels, which the servers must then attach)."""
    with client(*addresses, data_channel=data_channel) as c:
        pipe = c.open(f"bench-{next(_names)}", spec, workers=workers)
        for _ in range(4):
            pipe.run()
        fan = pipe.fan_in
        attached = pipe.data_channel if fan is None else bool(fan.data_channels())
        if attached != data_channel:
            raise RuntimeError(f"data channel {'not ' if data_channel else ''}attached")
        cpu, start = process_cpu_s(), time.perf_counter()
        for _ in range(batches):
            pipe.run()
        took, used = time.perf_counter() - start, process_cpu_s() - cpu
        pipe.close()
        c.delete(pipe.name)
    return batches * batch / took, used / (batches * batch)


@contextmanager
def pinned_trainer(server_cores: tuple[int, int]) -> Iterator[str]:
    """This process (every thread) on the cores the servers do not use, where there are
    such cores; says where the trainer runs."""
    allowed = os.sched_getaffinity(0)
    rest = sorted(allowed - set(server_cores))
    if not rest:
        yield "not pinned (no core left beside the servers')"
        return
    cores = ",".join(map(str, rest))
    subprocess.run(["taskset", "-a", "-p", "-c", cores, str(os.getpid())], check=True,
                   capture_output=True)
    try:
        yield f"pinned to cores {cores}"
    finally:
        subprocess.run(["taskset", "-a", "-p", "-c", ",".join(map(str, sorted(allowed))),
                        str(os.getpid())], check=True, capture_output=True)


def scaling_on_cores(data_root: Path, image_dir: Path, log_dir: Path, runs: int,
                     batches: int, cores: tuple[int, int]) -> str:
    spec = heavy(str(image_dir))
    first, second = cores
    with pinned_trainer(cores) as where:
        print("Scaling on real cores: decode + rotate + resize 224, batches of 8; servers "
              f"pinned (one worker thread each), the trainer {where}\n")
        with fleet(data_root, log_dir) as f:
            a, b = f.start(core=first), f.start(core=second)
            one_name, two_name = f"1 server (core {first})", f"2 servers (cores {first}, {second})"
            got = interleaved({
                one_name: lambda: rate([a], spec, 1, batches, 8)[0],
                two_name: lambda: rate([a, b], spec, 2, batches, 8)[0],
            }, runs)
    table([[name, f"{median(v):.0f}", spread(v)] for name, v in got.items()],
          ["trainer fed by", "images/s", "spread"])
    scaled = ratio(got[two_name], got[one_name])
    print(f"2 servers / 1 server: {scaled}\n")
    return f"2 pinned servers / 1 (target >= 1.6): {scaled}"


def mechanism(data_root: Path, log_dir: Path, runs: int, batches: int) -> str:
    print(f"Mechanism scaling: a fixed wait of {WAIT_MS * SLEEPY_BATCH:.0f} ms per batch "
          f"({SLEEPY_BATCH} samples of {WAIT_MS} ms), one server computing one batch at a "
          "time\n")
    spec = waiting()
    counts = (1, 2, 4, 8)
    with fleet(data_root, log_dir) as f:
        free = [f.start(wait_ms=0) for _ in range(2)]
        limit = [rate(free, spec, 2, batches * 4, SLEEPY_BATCH)[0] / SLEEPY_BATCH
                 for _ in range(runs)]
    with fleet(data_root, log_dir) as f:
        addresses = [f.start() for _ in range(max(counts))]
        def of(k: int) -> Callable[[], float]:
            return lambda: rate(addresses[:k], spec, k, batches, SLEEPY_BATCH)[0] / SLEEPY_BATCH
        measured = interleaved({str(k): of(k) for k in counts}, runs)
        got = {int(k): v for k, v in measured.items()}
    ideal = 1000 / (WAIT_MS * SLEEPY_BATCH)
    rows = [[f"{k} server{'s' if k > 1 else ''}", f"{median(v):.1f}", spread(v, "{:.1f}"),
             f"{median(v) / ideal:.2f}", f"{median(v) / (k * median(got[1])):.2f}"]
            for k, v in got.items()]
    table(rows, ["workers", "batches/s", "spread", "x one wait", "of k x 1 server"])
    print("(1 server: its stream, workers=1; more: the fan-in)")
    print(f"the trainer's own limit on this pipeline (no wait, 2 servers): "
          f"{median(limit):.0f} batches/s ({spread(limit)})\n")
    return "k servers / (k x 1 server): " + ", ".join(
        f"{k}: {median(v) / (k * median(got[1])):.2f}" for k, v in got.items() if k > 1)


def trainer_cost(data_root: Path, log_dir: Path, runs: int, batches: int) -> None:
    print(f"Trainer cost: CPU of the trainer process per received 224x224x3 float16 image "
          f"(batches of {FLAT_BATCH}, {FLAT_BATCH * 224 * 224 * 3 * 2 / 1e6:.1f} MB)\n")
    spec = images_f16()
    with fleet(data_root, log_dir) as one, fleet(data_root, log_dir) as four:
        alone = [one.start()]
        addresses = [four.start() for _ in range(4)]
        contenders: dict[str, Callable[[], float]] = {}
        for label, servers, workers in (("1 server, its stream", alone, 1),
                                        ("fan-in of 1", alone, "auto"),
                                        ("fan-in of 4", addresses, 4)):
            for on, how in ((False, "gRPC frames"), (True, "data channel")):
                contenders[f"{label}, {how}"] = (
                    lambda s=servers, w=workers, on=on:  # type: ignore[misc]
                    rate(s, spec, w, batches, FLAT_BATCH, data_channel=on)[1])
        got = interleaved(contenders, runs)
    table([[name, f"{median(v) * 1000:.3f}", spread([x * 1000 for x in v], "{:.3f}")]
           for name, v in got.items()], ["trainer fed by", "ms CPU / image", "spread"])
    print(f"(load average {' '.join(f'{x:.2f}' for x in os.getloadavg())})\n")


def tail(data_root: Path, log_dir: Path, runs: int) -> None:
    print("Tail: the longest wait for one batch when one of 3 workers fails mid-stream "
          f"(a {WAIT_MS * SLEEPY_BATCH:.0f} ms wait per batch; keepalive 1 s + 1 s)\n")
    spec = waiting()
    rows = []
    for fault in ("kill -9", "SIGSTOP"):
        stalls, usual = [], []
        for _ in range(runs):
            with fleet(data_root, log_dir) as f:
                addresses = [f.start() for _ in range(3)]
                with client(*addresses) as c:
                    pipe = c.open(f"tail-{next(_names)}", spec, workers=3)
                    gaps = []
                    for i in range(120):
                        if i == 40:
                            os.kill(f.pid(addresses[2]),
                                    signal.SIGKILL if fault == "kill -9" else signal.SIGSTOP)
                        started = time.perf_counter()
                        pipe.run()
                        gaps.append(time.perf_counter() - started)
                    pipe.close()
            stalls.append(max(gaps[40:]))
            usual.append(median(gaps[:40]))
        rows.append([fault, f"{median(stalls):.2f}", spread(stalls, "{:.2f}"),
                     f"{median(usual) * 1000:.0f}"])
    table(rows, ["worker fault", "longest wait (s)", "spread", "usual wait (ms)"])


def random_access(image_dir: Path, data_root: Path, runs: int, batches: int) -> None:
    print("Random access in the engine: seek to an arbitrary index then run one batch (as a "
          "worker does for each run of indices asked), against running in order\n")
    rng = np.random.default_rng(0)
    rows = []
    for label, spec, roots in (
            ("file reader, shuffled (decode, rotate, resize)", heavy(str(image_dir)),
             [data_root]),
            (f"external source ({WAIT_MS} ms per sample)", waiting(), None)):
        def in_order(spec: Any = spec, roots: Any = roots) -> float:
            with Pipeline(spec, data_roots=roots) as pipe:
                pipe.run()
                start = time.perf_counter()
                for _ in range(batches):
                    pipe.run()
                return (time.perf_counter() - start) / batches

        def seeking(spec: Any = spec, roots: Any = roots) -> float:
            with Pipeline(spec, data_roots=roots) as pipe:
                pipe.run()
                targets = rng.integers(0, 100_000, batches)
                start = time.perf_counter()
                for index in targets:
                    pipe.seek(int(index))
                    pipe.produce_until = int(index) + 1
                    pipe.run()
                return (time.perf_counter() - start) / batches

        got = interleaved({"in order": in_order, "seeking": seeking}, runs)
        rows.append([label, f"{median(got['in order']) * 1000:.1f}",
                     f"{median(got['seeking']) * 1000:.1f}",
                     ratio(got["seeking"], got["in order"])])
    table(rows, ["source", "ms / batch in order", "ms / batch seeking", "seeking / in order"])


PARTS = ("cores", "mechanism", "trainer", "tail", "seek")


def cores_pair(text: str) -> tuple[int, int]:
    """``"a,b"``: two distinct cores this process may use."""
    try:
        a, b = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected two core "
                                         "numbers such as 0,1") from None
    allowed = os.sched_getaffinity(0)
    if a == b or a not in allowed or b not in allowed:
        raise argparse.ArgumentTypeError(f"{text!r} must name two different cores "
                                         f"of the ones this process may use "
                                         f"({sorted(allowed)})")
    return a, b


def main(argv: list[str] | None = None) -> int:
    def only(p: argparse.ArgumentParser) -> None:
        p.add_argument("--only", choices=PARTS, action="append",
                       help="run only these parts (repeatable)")
        p.add_argument("--cores", type=cores_pair, default=(0, 1),
                       help="the two cores the scaling part pins its servers to, e.g. 2,3 "
                            "(default 0,1); the trainer takes the machine's other cores")
    args = parse_args((__doc__ or "").splitlines()[0], argv=argv, extra=only)
    parts = args.only or PARTS
    # Only the file reader's parts read images (made once, then cached under --data).
    image_dir = make_dataset(args.data, args.images) if {"cores", "seek"} & set(parts) \
        else args.data
    log_dir = Path(os.environ.get("TMPDIR", "/tmp")) / "conveyor-bench-fleet"
    log_dir.mkdir(exist_ok=True)
    print(machine(), "\n")
    # Each measurement reads many more batches than the fan-in's reorder window holds
    # (4 per worker + 4), so what was computed ahead during the warm-up does not count.
    batches = 30 if args.quick else 80
    ratios = []
    if "cores" in parts:
        ratios.append(scaling_on_cores(args.data, image_dir, log_dir, args.runs, batches,
                                       args.cores))
    if "mechanism" in parts:
        ratios.append(mechanism(args.data, log_dir, args.runs, batches * 5))
    if "trainer" in parts:
        trainer_cost(args.data, log_dir, args.runs, batches * 3)
    if "seek" in parts:
        random_access(image_dir, args.data, args.runs, batches)
    if "tail" in parts:
        tail(args.data, log_dir, max(1, args.runs // 2))
    if ratios:
        print("Ratios (medians of per-run ratios, spread):")
        for line in ratios:
            print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
