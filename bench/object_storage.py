"""Data in object storage: the S3 client library, and the ResNet-50 CPU pipeline reading
from a real S3 server (SeaweedFS's ``weed`` on loopback) against reading from local disk.

1. Fetching the data set's JPEGs (about 100 kB each) from the store, 64 requests in
   flight: obstore (the library the server uses: Rust's object_store on one event loop)
   against boto3 (a pool of 64 threads, one ``get_object`` each, as boto3's users fetch
   concurrently). Objects/s; the ratio obstore / boto3.
2. The ResNet-50 training pipeline of ``bench.resnet50`` (float16, 2 threads, batches of
   64), in process, reading ``s3://bench/...`` with the server's fetch-ahead against the
   same files in a folder: images/s, the ratio store / disk (target >= 0.9); and the same
   through a proxy that holds every request 20 ms before passing it on (target >= 0.8:
   fetching ahead hides the latency).

Each pipeline row also says the CPU time each image cost: in this process (the pipeline,
and obstore's threads) and in the store's processes (``weed`` and the proxy), read from
``/proc``. On one machine the store takes its CPU from the pipeline; where the store has
a machine of its own it does not. ``--pin`` gives it a core of its own here: this process
keeps the first core, ``weed`` and the proxies run on the rest, for every contender alike
(the disk row too), so the ratios compare what reading from the store costs the pipeline.

boto3 is not a dependency of Conveyor: its rows say so where it is absent (put it on
PYTHONPATH, ``pip install --target DIR boto3``, to measure it). Contenders alternate, each
figure is the median over runs, each ratio the median of per-run ratios.

Run: python -m bench.object_storage [--quick] [--runs N] [--batches N] [--pin] [--data DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import obstore

from bench._shared import (
    image_files,
    interleaved,
    machine,
    make_dataset,
    median,
    parse_args,
    ratio,
    spread,
    table,
)
from bench.resnet50 import BATCH, resnet50_pipeline
from conveyor.transport.allocator import DEFAULT, tune_malloc
from conveyor_server import Pipeline
from conveyor_server.engine.data.object_clients import BucketSettings, ObjectStoreSettings
from conveyor_server.engine.data.object_store import ObjectStores
from tests.support.fault_proxy import FaultProxy
from tests.support.seaweed import ADMIN, REGION, WeedProcess, free_ports

IN_FLIGHT = 64
DELAY_S = 0.020
OBSTORE, BOTO3 = "obstore, one event loop", f"boto3, {IN_FLIGHT} threads"
DISK, STORE = "ResNet-50 from local disk", "ResNet-50 from SeaweedFS"
SLOW = f"ResNet-50 from SeaweedFS + {DELAY_S * 1000:.0f} ms per request"
PROXIED = "ResNet-50 from SeaweedFS through the proxy, no delay"
CACHED = "ResNet-50 from SeaweedFS through a warm node cache"


def _proxy(port: int, target: int, delay: float) -> None:
    """Serve the delaying proxy (in a process of its own: its copying must not take this
    process's interpreter lock from the pipeline it measures)."""
    FaultProxy(target, delay=delay, port=port)
    threading.Event().wait()  # until the process is killed


class DelayingProxy:
    """A TCP proxy on loopback that holds each chunk a client sends for ``delay`` seconds
    before passing it to ``port`` (one request, one chunk: every request is late by it)."""

    def __init__(self, port: int, delay: float) -> None:
        self.port = free_ports(1)[0]
        self._proc = multiprocessing.get_context("spawn").Process(
            target=_proxy, args=(self.port, port, delay), daemon=True)
        self._proc.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the delaying proxy did not start")

    @property
    def pid(self) -> int:
        assert self._proc.pid is not None
        return self._proc.pid

    def close(self) -> None:
        self._proc.kill()
        self._proc.join()


def stores(endpoint: str, cache: str = "") -> ObjectStores:
    return ObjectStores(ObjectStoreSettings(default=BucketSettings(
        endpoint=endpoint, region=REGION, allow_http=True), cache_dir=cache,
        cache_max_bytes=1 << 30 if cache else 0))


def obstore_fetch(endpoint: str, keys: list[str]) -> Callable[[], float]:
    from obstore.store import S3Store

    store = S3Store("bench", endpoint=endpoint, region=REGION, access_key_id=ADMIN[0],
                    secret_access_key=ADMIN[1], client_options={"allow_http": True})

    async def fetch_all() -> int:
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def one(key: str) -> int:
            async with gate:
                result = await obstore.get_async(store, key)
                return len(await result.bytes_async())
        return sum(await asyncio.gather(*(one(k) for k in keys)))

    def run() -> float:
        start = time.perf_counter()
        asyncio.run(fetch_all())
        return len(keys) / (time.perf_counter() - start)
    return run


def boto3_fetch(endpoint: str, keys: list[str]) -> Callable[[], float] | str:
    try:
        import boto3  # type: ignore[import-not-found]  # not a dependency
        from botocore.config import Config  # type: ignore[import-not-found]
    except ImportError:
        return "boto3 is not installed here"
    client = boto3.client("s3", endpoint_url=endpoint, region_name=REGION,
                          aws_access_key_id=ADMIN[0], aws_secret_access_key=ADMIN[1],
                          config=Config(max_pool_connections=IN_FLIGHT))

    def one(key: str) -> int:
        return len(client.get_object(Bucket="bench", Key=key)["Body"].read())

    def run() -> float:
        with ThreadPoolExecutor(IN_FLIGHT) as pool:
            start = time.perf_counter()
            list(pool.map(one, keys))
            return len(keys) / (time.perf_counter() - start)
    return run


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of process ``pid`` (and those it starts later) to ``cpus``."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        os.sched_setaffinity(int(task.name), cpus)


class Clock:
    """Where a run's timed part starts and stops: wall time, this process's CPU time and
    the store's (``store_pids``)."""

    def __init__(self, store_pids: list[int]) -> None:
        self._store_pids = store_pids
        self.at: list[tuple[float, float, float]] = []

    def mark(self) -> None:
        store = sum(cpu_seconds(pid) for pid in self._store_pids)
        self.at.append((time.perf_counter(), time.process_time(), store))


class Costs:
    """CPU milliseconds per image of each pipeline run: this process's, the store's."""

    def __init__(self, store_pids: list[int]) -> None:
        self.store_pids = store_pids
        self.own: dict[str, list[float]] = {}
        self.store: dict[str, list[float]] = {}

    def measure(self, name: str, run: Callable[[Clock], int]) -> Callable[[], float]:
        """``run`` (which marks its clock where its timed part starts and stops, and
        returns the images it timed) as a contender: its images/s; its CPU per image is
        recorded here."""
        def timed() -> float:
            clock = Clock(self.store_pids)
            images = run(clock)
            (wall0, own0, store0), (wall1, own1, store1) = clock.at
            self.own.setdefault(name, []).append((own1 - own0) * 1e3 / images)
            self.store.setdefault(name, []).append((store1 - store0) * 1e3 / images)
            return images / (wall1 - wall0)
        return timed


def resnet50(root: str, batches: int, roots: list[str],
             objects: ObjectStores | None = None) -> Callable[[Clock], int]:
    """A run: the pipeline opened and two batches untimed, then ``batches`` timed."""
    def run(clock: Clock) -> int:
        with Pipeline(resnet50_pipeline(root), data_roots=roots, objects=objects) as pipe:
            for _ in range(2):
                pipe.run()
            clock.mark()
            for _ in range(batches):
                pipe.run()
            clock.mark()
        return batches * BATCH
    return run


def main() -> None:
    def extra_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--batches", type=int, default=None,
                       help="batches timed per run (default 12; 3 with --quick)")
        p.add_argument("--pin", action="store_true",
                       help="this process on the first core, the store on the others")

    args = parse_args(__doc__.splitlines()[0], extra_args)
    cores = sorted(os.sched_getaffinity(0))
    if args.pin and len(cores) < 2:
        raise SystemExit("--pin needs two cores at least")
    own_cores, store_cores = ({cores[0]}, set(cores[1:])) if args.pin else (set(), set())
    if own_cores:
        pin(os.getpid(), own_cores)
    tune_malloc(DEFAULT)
    count = 256 if args.quick else 512
    data = make_dataset(args.data, count)
    files = image_files(data)
    batches = args.batches or (3 if args.quick else 12)
    print(f"# Data in object storage ({machine()})\n# {len(files)} JPEGs "
          f"({sum(os.path.getsize(f) for f in files) / len(files) / 1e3:.0f} kB on average), "
          f"median of {args.runs} interleaved runs (min-max)\n")
    with tempfile.TemporaryDirectory(prefix="conveyor-bench-weed-") as tmp:
        weed = WeedProcess(Path(tmp)).start()
        os.environ.update(weed.env())
        proxy, plain = DelayingProxy(weed.s3, DELAY_S), DelayingProxy(weed.s3, 0.0)
        assert weed.proc is not None
        store_pids = [weed.proc.pid, proxy.pid, plain.pid]
        if store_cores:
            for pid in store_pids:
                pin(pid, store_cores)
        costs = Costs(store_pids)
        try:
            weed.create_bucket("bench")
            weed.upload_tree("bench", data, data.name)
            keys = [f"{data.name}/{Path(f).relative_to(data).as_posix()}" for f in files]
            fetchers: dict[str, Callable[[], float]] = {OBSTORE: obstore_fetch(weed.endpoint,
                                                                               keys)}
            theirs = boto3_fetch(weed.endpoint, keys)
            if isinstance(theirs, str):
                absent = f"{BOTO3}: not measured. {theirs}"
            else:
                absent = ""
                fetchers[BOTO3] = theirs
            fetched = interleaved(fetchers, args.runs)
            s3_root = f"s3://bench/{data.name}"
            cached = stores(weed.endpoint, os.path.join(tmp, "cache"))
            warm = len(files) // BATCH - 2
            resnet50(s3_root, warm, ["s3://bench"], cached)(Clock([]))  # one whole epoch
            slow = f"http://127.0.0.1:{proxy.port}"
            pipelines = interleaved({name: costs.measure(name, run) for name, run in {
                DISK: resnet50(str(data), batches, [str(data.parent)]),
                STORE: resnet50(s3_root, batches, ["s3://bench"], stores(weed.endpoint)),
                PROXIED: resnet50(s3_root, batches, ["s3://bench"],
                                  stores(f"http://127.0.0.1:{plain.port}")),
                SLOW: resnet50(s3_root, batches, ["s3://bench"], stores(slow)),
                CACHED: resnet50(s3_root, batches, ["s3://bench"], cached),
            }.items()}, args.runs)
        finally:
            proxy.close()
            plain.close()
            weed.kill()
    table([(name, f"{median(v):,.0f}", spread(v, "{:,.0f}")) for name, v in fetched.items()],
          ("fetching the JPEGs", "objects/s", "spread"))
    if absent:
        print(absent + "\n")
    where = (f"this process on core {cores[0]}, the store on {sorted(store_cores)}"
             if args.pin else f"everything on the same {len(cores)} cores")
    print(f"# ResNet-50 CPU pipeline, float16, batches of {BATCH}, {batches * BATCH} images "
          f"timed per run; {where}\n")
    table([(name, f"{median(v):,.0f}", spread(v, "{:,.0f}"),
            f"{median(costs.own[name]):.2f}", f"{median(costs.store[name]):.2f}")
           for name, v in pipelines.items()],
          ("contender", "images/s", "spread", "CPU ms/image here", "CPU ms/image store"))
    rows: list[tuple[Any, ...]] = [
        (f"{STORE} / {DISK} (target >= 0.9)", ratio(pipelines[STORE], pipelines[DISK])),
        (f"{SLOW} / {DISK} (target >= 0.8)", ratio(pipelines[SLOW], pipelines[DISK])),
        (f"{SLOW} / {PROXIED} (the latency alone)", ratio(pipelines[SLOW], pipelines[PROXIED])),
        (f"{CACHED} / {DISK} (target >= 0.95)", ratio(pipelines[CACHED], pipelines[DISK]))]
    if BOTO3 in fetched:
        rows.insert(0, (f"{OBSTORE} / {BOTO3}", ratio(fetched[OBSTORE], fetched[BOTO3])))
    table(rows, ("ratio", "median (min-max)"))


if __name__ == "__main__":
    main()
