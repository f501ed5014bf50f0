"""What the benchmarks share: the data set, a server harness, timing and tables.

Every figure is a median over runs in which the contenders alternate (A/B interleaved),
with the spread (min-max) beside it, because this 2-core machine is noisy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import cv2
import numpy as np

from conveyor_server.redis_process import RedisProcess

DEFAULT_DATA = Path(os.environ.get("CONVEYOR_BENCH_DATA", "/tmp/conveyor-bench-data"))


def parse_args(description: str, extra: Callable[[argparse.ArgumentParser], None] | None = None,
               argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="data set directory (cached)")
    p.add_argument("--runs", type=int, default=5, help="interleaved runs per contender")
    p.add_argument("--quick", action="store_true", help="a small, fast smoke run")
    if extra:
        extra(p)
    args = p.parse_args(argv)
    if args.quick:
        args.runs = min(args.runs, 2)
    return args


def make_dataset(root: Path, count: int = 2000, size: tuple[int, int] = (405, 470)) -> Path:
    """``count`` textured JPEGs around 470x405 at quality 90, in 4 class folders under
    ``root/n<count>`` (cached). Returns that directory."""
    root = root / f"n{count}"
    marker = root / ".complete"
    if marker.exists():
        return root
    for i in range(count):
        folder = root / f"class_{i % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(i)
        h, w = size[0] + int(rng.integers(-20, 21)), size[1] + int(rng.integers(-20, 21))
        base = cv2.resize(rng.integers(0, 256, (h // 16, w // 16, 3), dtype=np.uint8), (w, h),
                          interpolation=cv2.INTER_CUBIC)
        texture = rng.normal(0, 14, (h, w, 3))
        img = np.clip(base + cv2.GaussianBlur(texture, (3, 3), 0), 0, 255).astype(np.uint8)
        ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
        assert ok
        (folder / f"img_{i:05d}.jpg").write_bytes(buf.tobytes())
    marker.touch()
    return root


def interleaved(contenders: dict[str, Callable[[], float]], runs: int) -> dict[str, list[float]]:
    """Run each contender ``runs`` times, alternating; each call returns one measurement."""
    results: dict[str, list[float]] = {name: [] for name in contenders}
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


def table(rows: Sequence[Sequence[object]], header: Sequence[str]) -> None:
    cells = [list(map(str, header))] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for n, row in enumerate(cells):
        print("  ".join(c.rjust(w) if n and i else c.ljust(w)
                        for i, (c, w) in enumerate(zip(row, widths, strict=True))))
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
    return f"{os.cpu_count()} cores, {cpu}, Python {sys.version.split()[0]}"


class Server:
    """A real conveyor-server subprocess with its own private Redis."""

    def __init__(self, data_root: Path, *extra: str) -> None:
        self.redis = RedisProcess().start()
        args = [sys.executable, "-m", "conveyor_server.main", "--host", "127.0.0.1",
                "--port", "0", "--redis-url", self.redis.url, "--data-root", str(data_root),
                "--log-level", "WARNING", "--max-pipelines", "256", *extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True,
                                     stdin=subprocess.DEVNULL)
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()),  # type: ignore[union-attr]
                                  daemon=True)
        reader.start()
        reader.join(60)
        if not line or "listening on" not in line[0]:
            self.close()
            raise RuntimeError(f"server did not start: {line!r}")
        self.address = line[0].split()[3]
        time.sleep(0.2)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.redis.cleanup()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
