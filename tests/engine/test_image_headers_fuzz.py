"""The batch header walk on a few thousand JPEGs and PNGs with bytes changed at random
(tests/support/header_cases.py: ``fuzzed``, a fixed seed): the compiled walk and the Python
one agree on every file and with the per-file functions; beyond the files it settles, the
compiled walk reads what Python reads; threads share it; and built with AddressSanitizer it
reads no byte outside a file, whether each file is its own array or a span of one buffer."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from conveyor_server.engine.admission.limits import NO_LIMITS
from conveyor_server.engine.ops.decode import batch_headers as bh
from conveyor_server.engine.ops.decode import decode
from tests.support.header_cases import (
    LIMITS,
    OP,
    assert_walks_agree,
    c_compiler,
    corpus,
    cuts,
    from_headers,
    fuzzed,
    jpeg_kinds,
    needs_walk,
    per_file,
)

SOURCE = (Path(__file__).resolve().parents[2] / "server" / "conveyor_server" / "engine" / "ops"
          / "decode" / "image_headers.c")


@pytest.mark.parametrize("limit", ["none", "default", "5062"])
def test_fuzzed_files_read_the_same_in_both_walks_and_per_file(limit: str) -> None:
    files = fuzzed(seed=17, count=3000)
    heads = assert_walks_agree(files, LIMITS[limit])
    # Against the per-file functions, on a tenth of them (the walks agree on all).
    for i in range(0, len(files), 10):
        assert from_headers(heads, i) == per_file(files[i], LIMITS[limit]), i
    assert len(heads.errors) > 100
    if bh.WALK == "compiled walk" and limit == "none":
        assert heads.settled.sum() > 1000  # most still pass, and are settled in C


@needs_walk
def test_the_raw_walk_reads_what_python_reads_even_where_it_leaves_a_file_to_python() -> None:
    """Beyond the files it settles: for every JPEG and PNG, the format, completeness, EXIF
    orientation and (where its header reads) size the compiled walk found."""
    from conveyor_server.engine.ops.decode._image_headers import walk_files

    files = fuzzed(seed=3, count=2000) + list(corpus().values())
    table = np.zeros((len(files), len(bh.FIELDS)), np.int64)
    walk_files(files, np.ndarray, table, -1)
    compared = 0
    for data, row in zip(files, table, strict=True):
        python, _ = bh.file_row(data, NO_LIMITS, OP)
        fmt = bh.FORMATS[int(row[0])]
        assert fmt == decode.sniff_format(data)
        if fmt in ("JPEG", "PNG"):
            assert row[2:5].tolist() == list(python[2:5])  # contiguous, complete, orientation
            if row[5:].any():
                assert row[5:].tolist() == list(python[5:])
                compared += 1
    assert compared > 1000


@needs_walk
def test_threads_share_the_walk() -> None:
    files = fuzzed(seed=8, count=400)
    expected = bh.batch_headers(files, LIMITS["default"], OP).table
    with ThreadPoolExecutor(4) as pool:
        tables = list(pool.map(lambda _: bh.batch_headers(files, LIMITS["default"], OP).table,
                               range(16)))
    for table in tables:
        np.testing.assert_array_equal(table, expected)


# -- AddressSanitizer ------------------------------------------------------------------------

ASAN_CHILD = """
import importlib.util, sys
import numpy as np
spec = importlib.util.spec_from_file_location("_image_headers", sys.argv[1])
walk = importlib.util.module_from_spec(spec)
spec.loader.exec_module(walk)
cases = np.load(sys.argv[2], allow_pickle=False)
sizes = np.load(sys.argv[3], allow_pickle=False)
files, at = [], 0
for n in sizes.tolist():
    files.append(cases[at:at + n].copy())  # each its own allocation: ASan guards its ends
    at += n
out = np.zeros((len(files), walk.N_FIELDS), np.int64)
for max_pixels in (-1, 100_000_000, 5062):
    walk.walk_files(files, np.ndarray, out, max_pixels)
    np.save(sys.argv[4] + f"_{max_pixels}.npy", out)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    spans = np.zeros_like(out)
    walk.walk_spans(cases, offsets, sizes.astype(np.int64), spans, max_pixels)
    assert (spans == out).all()
print("walked", len(files))
"""


def asan_runtime() -> str | None:
    cc = c_compiler()
    if cc is None or ("gcc" not in Path(cc).name and Path(cc).name != "cc"):
        return None
    found = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True,
                           text=True, check=False).stdout.strip()
    return found if found and Path(found).exists() else None


@needs_walk
@pytest.mark.skipif(asan_runtime() is None, reason="no AddressSanitizer runtime (libasan)")
def test_built_with_address_sanitizer_the_walk_reads_inside_each_file(tmp_path: Path) -> None:
    cc, runtime = c_compiler(), asan_runtime()
    assert cc is not None and runtime is not None
    module = tmp_path / "_image_headers.abi3.so"
    subprocess.run([cc, "-fsanitize=address", "-fno-omit-frame-pointer", "-g", "-O1", "-fPIC",
                    "-shared", "-DPy_LIMITED_API=0x030B0000",
                    f"-I{sysconfig.get_paths()['include']}", str(SOURCE), "-o", str(module)],
                   check=True, capture_output=True, timeout=120)
    files = fuzzed(seed=29, count=3000) + list(corpus().values())
    files += [cut for kind in ("4:2:0", "exif thumbnail") for cut in cuts(jpeg_kinds()[kind])]
    np.save(tmp_path / "cases.npy", np.concatenate(files))
    np.save(tmp_path / "sizes.npy", np.array([f.size for f in files], np.int64))
    env = {**os.environ, "LD_PRELOAD": runtime, "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1"}
    child = subprocess.run([sys.executable, "-c", ASAN_CHILD, str(module),
                            str(tmp_path / "cases.npy"), str(tmp_path / "sizes.npy"),
                            str(tmp_path / "table")],
                           capture_output=True, text=True, env=env, timeout=300, check=False)
    assert child.returncode == 0 and "AddressSanitizer" not in child.stderr, child.stderr[-3000:]
    assert child.stdout.strip() == f"walked {len(files)}"
    from conveyor_server.engine.ops.decode._image_headers import walk_files

    for max_pixels in (-1, 100_000_000, 5062):  # the sanitized build reads what the other does
        table = np.zeros((len(files), len(bh.FIELDS)), np.int64)
        walk_files(files, np.ndarray, table, max_pixels)
        np.testing.assert_array_equal(np.load(tmp_path / f"table_{max_pixels}.npy"), table)



