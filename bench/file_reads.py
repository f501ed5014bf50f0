"""Reading a batch's files: one call for the batch (``engine/data/file_batch.py``) against one
read per file (``DataFiles.read``, as each sample read its own before), beneath a data root,
from the page cache.

Contenders (microseconds per file, one thread, wall = CPU):
- per file: each sample's ``DataFiles.read`` (open beneath the root's directory one path
  part at a time, fstat, read, checks) and its label array, in Python under the GIL
- batched, compiled: one ``FileBatch`` for the batch (``batch_read.c``: openat2, fstat,
  pread into one buffer, the GIL released for the whole batch), then each sample's view and
  label
- batched, Python: the same with the compiled reader's Python twin (a server installed
  without a C compiler)

The files: ``--files`` files of about ``--size`` bytes (sizes vary by +-10 %, random bytes,
named .jpg) in 4 folders, made once under ``--data``; each run reads them ``--batches`` times
as batches of all of them, after one untimed batch. Contenders alternate (A B C, C B A,
...); the figure is the median over runs, the ratio the median of per-run ratios.

Beside each batched contender: the part of its time spent outside the reader's call (in
Python, holding the GIL; the compiled reader's call holds it only to take the paths). Per
file, the files' bytes are copied from the page cache either way (~10 us per 110 kB file
here), so with ``--size 1000`` the figures are the per-file overheads alone.

Run: python -m bench.file_reads [--quick] [--runs N] [--files N] [--size BYTES] [--data DIR]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench._shared import interleaved, machine, median, parse_args, ratio, spread, table
from conveyor_server.engine.data import batch_read, file_batch
from conveyor_server.engine.data.entries import FileEntry
from conveyor_server.engine.data.file_batch import FileBatch
from conveyor_server.engine.data.file_list import resolve
from conveyor_server.engine.data.files import DataFiles
from conveyor_server.engine.data.roots import DataRoots

PER_FILE, COMPILED, PYTHON = "per file", "batched, compiled", "batched, Python"


def make_files(root: Path, count: int, size: int) -> Path:
    """``root/files-{count}x{size}/class_k/f_i.jpg``, made once; returns the folder."""
    out = root / f"files-{count}x{size}"
    marker = out / ".complete"
    if marker.exists():
        return out
    rng = np.random.default_rng(7)
    for i in range(count):
        path = out / f"class_{i % 4}" / f"f_{i:05d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        n = int(size * rng.uniform(0.9, 1.1))
        path.write_bytes(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
    marker.touch()
    return out


def per_file(files: DataFiles, entries: Sequence[FileEntry]) -> int:
    got = 0
    for entry in entries:
        data = files.read(entry)
        np.array([entry.label], dtype=np.int32)
        got += data.size
    return got


class Clocked:
    """A reader's ``read_files`` that adds the seconds spent in it to ``seconds``."""

    def __init__(self, read: batch_read.ReadFiles) -> None:
        self.read, self.seconds = read, 0.0

    def __call__(self, *args: Any) -> None:
        start = time.perf_counter()
        self.read(*args)
        self.seconds += time.perf_counter() - start


def batched(files: DataFiles, entries: Sequence[FileEntry]) -> int:
    batch = FileBatch(files, entries)
    got = 0
    for slot in range(len(entries)):
        data = batch.take(slot)
        batch.label(slot)
        got += data.size
    return got


def timed(read: Callable[[DataFiles, Sequence[FileEntry]], int], files: DataFiles,
          entries: Sequence[FileEntry], batches: int, expected: int,
          reader: batch_read.ReadFiles | None = None) -> tuple[float, float]:
    """Microseconds per file over ``batches`` batches, after one untimed, and of them those
    outside ``reader`` (the batch read's ``read_files``; all where None)."""
    clocked = Clocked(reader or batch_read.read_files)
    installed = file_batch.read_files
    file_batch.read_files = clocked
    try:
        assert read(files, entries) == expected
        clocked.seconds = 0.0
        start = time.perf_counter()
        for _ in range(batches):
            read(files, entries)
        total = time.perf_counter() - start
    finally:
        file_batch.read_files = installed
    per = batches * len(entries)
    return total / per * 1e6, (total - clocked.seconds) / per * 1e6


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--files", type=int, default=256, help="files per batch (default 256)")
    p.add_argument("--size", type=int, default=110_000,
                   help="bytes per file, about (default 110000)")
    p.add_argument("--batches", type=int, default=None,
                   help="batches timed per run (default 40; 10 with --quick)")


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__.splitlines()[0], options, argv)
    batches = args.batches or (10 if args.quick else 40)
    folder = make_files(args.data, args.files, args.size)
    entries = resolve({"file_root": str(folder)}, [args.data])
    files = DataFiles(DataRoots([args.data]))
    expected = sum(e.size for e in entries)
    contenders: dict[str, Callable[[], tuple[float, float]]] = {
        PER_FILE: lambda: timed(per_file, files, entries, batches, expected),
        PYTHON: lambda: timed(batched, files, entries, batches, expected,
                              batch_read.read_files_python)}
    if batch_read.READER == "compiled":
        contenders = {PER_FILE: contenders[PER_FILE],
                      COMPILED: lambda: timed(batched, files, entries, batches, expected),
                      PYTHON: contenders[PYTHON]}
    print(f"{machine()}; {len(entries)} files of about {args.size:,} bytes per batch, "
          f"{batches} batches per run, {args.runs} runs; reader: {batch_read.READER}\n")
    try:
        results = interleaved(contenders, args.runs)
    finally:
        files.close()
    base = [us for us, _ in results[PER_FILE]]
    rows = []
    for name, measures in results.items():
        us = [total for total, _ in measures]
        outside = [rest for _, rest in measures]
        rows.append([name, f"{median(us):.1f}", spread(us, "{:.1f}"),
                     "1.00" if name == PER_FILE else ratio(us, base),
                     "-" if name == PER_FILE else f"{median(outside):.1f}"])
    table(rows, ["contender", "us per file", "spread", "x per file", "outside the reader"])


if __name__ == "__main__":
    main()
