"""Data sets for the numpy and webdataset readers' tests: real ``.npy`` files and real tar
shards (``tarfile``), with the values each sample holds so tests can compare."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np

from conveyor_server.demo.sample_data import make_image


def npy_array(i: int, dtype: str = "float32", shape: tuple[int, ...] = (3, 4)) -> np.ndarray:
    """Sample ``i``'s array: distinct values per sample and element."""
    values = (np.arange(int(np.prod(shape)), dtype=np.int64) * 7 + i * 1000) % 251 - 125
    if dtype == "bool":
        return (values.reshape(shape) % 3 == 0)
    return values.reshape(shape).astype(dtype)


def make_npy_folder(root: Path, count: int = 11, *, dtype: str = "float32",
                    subfolders: int = 2) -> list[Path]:
    """``count`` .npy files, some directly in ``root`` and the rest in ``subfolders``
    folders below it, with a file the default filter leaves out; the paths in DALI's
    listing order (root first, then each folder, names sorted)."""
    root.mkdir(parents=True, exist_ok=True)
    folders = [root] + [root / f"part_{k}" for k in range(subfolders)]
    for folder in folders:
        folder.mkdir(exist_ok=True)
        (folder / "notes.txt").write_text("not an array")
    paths = []
    for i in range(count):
        folder = folders[i % len(folders)]
        path = folder / f"arr_{i:03d}.npy"
        shape = (2 + i % 3, 4)  # shapes differ from sample to sample
        np.save(path, npy_array(i, dtype, shape))
        paths.append(path)
    order = {f: n for n, f in enumerate(folders)}
    return sorted(paths, key=lambda p: (order[p.parent], p.name))


def add_member(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), 1_700_000_000
    archive.addfile(info, io.BytesIO(data))


def sample_members(key: str, i: int) -> list[tuple[str, bytes]]:
    """Sample ``i``'s members: an image-like payload of varying size and an int32 class."""
    payload = bytes((i * 31 + k) % 256 for k in range(20 + 3 * (i % 5)))
    return [(f"{key}.jpg", payload), (f"{key}.cls", np.int32(i).tobytes())]


def jpeg_members(key: str, i: int) -> list[tuple[str, bytes]]:
    """Sample ``i``'s members: a real JPEG (sizes vary) and an int32 class."""
    image = make_image(i, 24 + 4 * (i % 3), 32)
    ok, jpeg = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    return [(f"{key}.jpg", jpeg.tobytes()), (f"{key}.cls", np.int32(i % 5).tobytes())]


def make_shards(root: Path, sizes: Sequence[int], prefix: str = "shard", *,
                jpeg: bool = False) -> list[Path]:
    """Tar shards holding ``sizes[s]`` samples each (numbered across the shards, keys
    ``s{s}/{n:05d}``), each sample a .jpg (real JPEGs with ``jpeg``) and a .cls member;
    the shards' paths."""
    members = jpeg_members if jpeg else sample_members
    root.mkdir(parents=True, exist_ok=True)
    paths, n = [], 0
    for s, size in enumerate(sizes):
        path = root / f"{prefix}-{s:04d}.tar"
        with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as archive:
            for _ in range(size):
                for name, data in members(f"s{s}/{n:05d}", n):
                    add_member(archive, name, data)
                n += 1
        paths.append(path)
    return paths


def write_index(shard: Path, index: Path) -> None:
    """A DALI index file (format v1.2, as ``wds2idx`` writes) for ``shard``."""
    samples: list[list[str]] = []
    last = None
    with tarfile.open(shard, "r:") as archive:
        for info in archive:
            if not info.isreg():
                continue
            base = info.name.rsplit("/", 1)[-1]
            key = info.name[:len(info.name) - len(base)] + base.split(".", 1)[0]
            ext = base.split(".", 1)[1] if "." in base else ""
            if key != last:
                samples.append([])
                last = key
            samples[-1].append(f"{ext} {info.offset_data} {info.size} {info.name}")
    index.write_text(f"v1.2 {len(samples)}\n" + "".join(" ".join(s) + "\n" for s in samples))
