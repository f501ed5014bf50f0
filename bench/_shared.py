"""What the benchmarks share: the data set, a server harness, timing and tables.

Every figure is a median over runs in which the contenders alternate (A/B interleaved:
A B C, then C B A, ...), with the spread (min-max) beside it, because this 2-core machine
is noisy. A ratio is the median of the per-run ratios (run i of A over run i of B, taken
moments apart), with their spread.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import cv2
import numpy as np

from conveyor.transport.channel import wait_serving
from conveyor_server.demo.launch import spawn_server, stop_server
from conveyor_server.store.redis_process import RedisProcess

DEFAULT_DATA = Path(os.environ.get("CONVEYOR_BENCH_DATA", "/tmp/conveyor-bench-data"))
#: Images in the data set: the full one, and the one of ``--quick``.
FULL_IMAGES, QUICK_IMAGES = 2000, 256
CLASSES = 4

T = TypeVar("T")


def parse_args(description: str, extra: Callable[[argparse.ArgumentParser], None] | None = None,
               argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA,
                   help=f"where the generated data set is cached (default {DEFAULT_DATA}, "
                        "or $CONVEYOR_BENCH_DATA)")
    p.add_argument("--runs", type=int, default=None,
                   help="interleaved runs per contender (default 5; 2 with --quick)")
    p.add_argument("--quick", action="store_true",
                   help=f"a smoke run: {QUICK_IMAGES} images, 2 runs, short runs")
    if extra:
        extra(p)
    args = p.parse_args(argv)
    if args.runs is None:
        args.runs = 2 if args.quick else 5
    args.images = QUICK_IMAGES if args.quick else FULL_IMAGES
    return args


def make_image(index: int, size: tuple[int, int] = (405, 470)) -> np.ndarray:
    """Image ``index`` (BGR): smooth colour fields with grain, about ``size`` (h, w)."""
    rng = np.random.default_rng(index)
    h, w = size[0] + int(rng.integers(-20, 21)), size[1] + int(rng.integers(-20, 21))
    base = cv2.resize(rng.integers(0, 256, (h // 16, w // 16, 3), dtype=np.uint8), (w, h),
                      interpolation=cv2.INTER_CUBIC)
    texture = rng.normal(0, 14, (h, w, 3))
    return np.clip(base + cv2.GaussianBlur(texture, (3, 3), 0), 0, 255).astype(np.uint8)


def make_dataset(root: Path, count: int = FULL_IMAGES) -> Path:
    """``root/n{count}/class_k/img_i.jpg``: ``count`` JPEGs around 470x405 at quality 90 in
    4 class folders, made deterministically and cached. Returns ``root/n{count}``; ``root``
    is the directory to give a server as its data root."""
    out = root / f"n{count}"
    marker = out / ".complete"
    if marker.exists():
        return out

    def write(i: int) -> None:
        ok, buf = cv2.imencode(".jpg", make_image(i), [cv2.IMWRITE_JPEG_QUALITY, 90])
        assert ok
        path = out / f"class_{i % CLASSES}" / f"img_{i:05d}.jpg"
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(buf.tobytes())
        tmp.replace(path)

    print(f"(generating {count} JPEGs in {out} ...)", file=sys.stderr, flush=True)
    for k in range(CLASSES):
        (out / f"class_{k}").mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:  # OpenCV releases the GIL
        list(pool.map(write, range(count)))
    marker.touch()
    return out


def image_files(data: Path) -> list[str]:
    return sorted(str(p) for p in data.rglob("*.jpg"))


# -- measuring -------------------------------------------------------------------------


def timed(step: Callable[[], object], batches: int, batch: int, warmup: int = 2) -> float:
    """Items per second of ``step`` (one batch of ``batch`` items), over ``batches`` calls
    after ``warmup`` untimed ones."""
    for _ in range(warmup):
        step()
    start = time.perf_counter()
    for _ in range(batches):
        step()
    return batches * batch / (time.perf_counter() - start)


def process_cpu_s(pid: int | None = None) -> float:
    """User + system CPU seconds so far of process ``pid`` (this one when None), all its
    threads: CPU per item moves less than items/s when other work shares the cores."""
    if pid is None:
        return time.process_time()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def interleaved(contenders: dict[str, Callable[[], T]], runs: int) -> dict[str, list[T]]:
    """Run each contender ``runs`` times, alternating (A B C, C B A, ...); each call is one
    measurement."""
    results: dict[str, list[T]] = {name: [] for name in contenders}
    for r in range(runs):
        order = list(contenders) if r % 2 == 0 else list(reversed(contenders))
        for name in order:
            results[name].append(contenders[name]())
    return results


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def spread(values: Sequence[float], fmt: str = "{:.0f}") -> str:
    return f"{fmt.format(min(values))}-{fmt.format(max(values))}"


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def ratio(numerator: Sequence[float], denominator: Sequence[float]) -> str:
    """Median of the per-run ratios with their spread: '0.94 (0.90-0.98)'."""
    per_run = [a / b for a, b in zip(numerator, denominator, strict=True)]
    return f"{median(per_run):.2f} ({spread(per_run, '{:.2f}')})"


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares (slope, intercept)."""
    slope, intercept = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    return float(slope), float(intercept)


_NUMERIC = re.compile(r"^[-+]?[\d.,]+(x|%| ?\([-\d.,]+\))?$|^[\d.,]+-[\d.,]+$")


def table(rows: Sequence[Sequence[object]], header: Sequence[str]) -> None:
    """Print a table: numeric columns right-aligned, the others left-aligned."""
    body = [[str(c) for c in r] for r in rows]
    cells = [list(map(str, header)), *body]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    numeric = [bool(body) and all(_NUMERIC.match(r[i]) for r in body) for i in range(len(header))]
    for row in cells:
        print("  ".join(c.rjust(w) if num else c.ljust(w)
                        for c, w, num in zip(row, widths, numeric, strict=True)).rstrip())
    print()


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0]
    return (f"{os.cpu_count()} cores, {cpu}, Python {sys.version.split()[0]}, "
            f"load average {load:.1f} at start")


# -- a real server ------------------------------------------------------------------------


class Server:
    """A real conveyor-server subprocess with its own private Redis (as
    tests/support/servers.py)."""

    def __init__(self, data_root: Path, *extra: str) -> None:
        self.redis = RedisProcess(appendonly=True).start()
        args = ["--host", "127.0.0.1", "--port", "0", "--redis-url", self.redis.url,
                "--data-root", str(data_root), "--log-level", "WARNING",
                "--max-pipelines", "256", *extra]
        try:
            self.proc, self.address = spawn_server(args)
            wait_serving(self.address)
        except Exception:
            self.redis.cleanup()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_bytes(self) -> int:
        """The server process's resident set (VmRSS), Redis not included."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def close(self) -> None:
        stop_server(self.proc, 20)
        self.redis.cleanup()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
