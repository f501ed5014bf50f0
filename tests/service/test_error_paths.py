"""Errors a client receives name files relative to their data root (``<root 0>/...``):
over a real server, for every error that names a file, neither the root as configured nor
its real path appears in the message or the error's metadata; the server's log has them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from conveyor import errors, fn, pipeline_def, types
from tests.support.image_files import png_bomb
from tests.support.images import make_image_folder
from tests.support.servers import Start, client

BATCH = 2


@pipeline_def(batch_size=BATCH, num_threads=1, seed=2, enable_checkpointing=True)
def decoding(**reader: Any) -> Any:
    files, labels = fn.readers.file(name="reader", **reader)
    return fn.resize(fn.decoders.image(files, output_type=types.RGB), size=(8, 8)), labels


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(the root as configured: a symlink, its real folder, a folder outside)."""
    real = tmp_path / "srv" / "volume-7" / "datasets"
    make_image_folder(real / "imgs", counts=(2, 2))
    configured = tmp_path / "data"
    os.symlink(real, configured)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "x.jpg").write_bytes(b"x")
    return configured, real, outside


def failure(call: Any) -> errors.ConveyorError:
    try:
        call()
    except errors.ConveyorError as exc:
        return exc
    raise AssertionError("no error")


def test_no_error_reveals_where_the_data_roots_are(
        start_server: Start, roots: tuple[Path, Path, Path]) -> None:
    configured, real, outside = roots
    imgs = configured / "imgs"
    server = start_server(roots=[configured], env={"CONVEYOR_LIMITS_MAX_FILE_BYTES": "20000"})
    got: dict[str, errors.ConveyorError] = {}
    with client(server) as c:
        def first_batch(name: str, **reader: Any) -> None:
            c.create(name, decoding(**reader)).run()

        def add(case: str, folder: str, prepare: Any = None, **reader: Any) -> None:
            root = make_image_folder(configured / folder, counts=(2,))
            target = root / "class_0" / "img_000.jpg"
            if prepare is not None:
                prepare(target)
            got[case] = failure(lambda: first_batch(folder, file_root=str(root), **reader))

        add("undecodable", "a", lambda p: p.write_bytes(bytes(p.stat().st_size)))
        add("bomb", "b", lambda p: p.write_bytes(png_bomb(16000, 16000)))
        add("above max_file_bytes", "c", lambda p: p.write_bytes(bytes(30000)))
        add("symlink out", "d", lambda p: os.symlink(outside / "x.jpg", p.parent / "z.jpg"))
        add("missing target", "e", lambda p: os.symlink(p.parent / "gone", p.parent / "z.jpg"))
        add("not UTF-8", "f", lambda p: open(os.fsencode(p.parent) + b"/\xff.jpg", "w").close())
        got["file_root missing"] = failure(lambda: first_batch("f1", file_root=str(imgs / "no")))
        (configured / "empty" / "class_0").mkdir(parents=True)
        got["no files"] = failure(lambda: first_batch("f2", file_root=str(configured / "empty")))
        (imgs / "list.txt").write_text("class_0/img_000.jpg zero\n")
        got["bad file_list"] = failure(lambda: first_batch("f3", file_list=str(imgs / "list.txt")))
        got["NUL in files"] = failure(lambda: first_batch("f4", file_root=str(imgs),
                                                          files=["class_0/a\0.jpg"]))
        # After the build: a file that grew, one swapped for a symlink, a changed data set.
        folder = make_image_folder(configured / "later", counts=(2, 2))
        grows = c.create("grows", decoding(file_root=str(folder)))
        (folder / "class_0" / "img_000.jpg").write_bytes(b"\xff" * 100)
        got["size changed"] = failure(grows.run)
        swapped = c.create("swapped", decoding(file_root=str(imgs)))
        victim = real / "imgs" / "class_0" / "img_001.jpg"
        link = victim.with_name("new")
        os.symlink(outside / "x.jpg", link)
        os.replace(link, victim)
        got["swapped for a symlink"] = failure(swapped.run)
        kept = c.create("kept", decoding(file_root=str(configured / "b")))
        checkpoint = kept.checkpoint()
        (configured / "b" / "class_0" / "img_001.jpg").write_bytes(b"changed")
        got["data changed"] = failure(lambda: c.restore("kept2", checkpoint=checkpoint.id))

    expected = {
        "undecodable": (errors.DataLoss, "'<root 0>/a/class_0/img_000.jpg': cannot decode"),
        "bomb": (errors.ResourceExhausted, "'<root 0>/b/class_0/img_000.jpg': the PNG image"),
        "above max_file_bytes": (errors.ResourceExhausted,
                                 "'<root 0>/c/class_0/img_000.jpg' is 30,000 bytes, above "
                                 "the server's limit limits.max_file_bytes = 20,000"),
        "symlink out": (errors.PermissionDenied, "'<root 0>/d/class_0/z.jpg' is outside"),
        "missing target": (errors.DataLoss, "cannot read '<root 0>/e/class_0/z.jpg'"),
        "not UTF-8": (errors.InvalidArgument, "'<root 0>/f/class_0/\\udcff.jpg' has a name"),
        "file_root missing": (errors.InvalidArgument, "'<root 0>/imgs/no' does not exist: check "
                                                   "the path"),
        "no files": (errors.InvalidArgument, "no files found in '<root 0>/empty'"),
        "bad file_list": (errors.InvalidArgument, "file_list '<root 0>/imgs/list.txt' line 1"),
        "NUL in files": (errors.SpecError, "contains a NUL character"),
        "size changed": (errors.DataLoss, "'<root 0>/later/class_0/img_000.jpg' has 100 bytes"),
        "swapped for a symlink": (errors.DataLoss, "'<root 0>/imgs/class_0/img_001.jpg': a "
                                                   "symbolic link"),
        "data changed": (errors.DataChanged, "file 1 '<root 0>/b/class_0/img_001.jpg' changed"),
    }
    assert set(got) == set(expected)
    for case, exc in got.items():
        kind, text = expected[case]
        assert isinstance(exc, kind), (case, exc)
        assert text in exc.message, (case, exc.message)
        for secret in (str(configured), str(real), str(real.parent)):
            assert secret not in exc.message, (case, exc.message)
            assert all(secret not in v for v in exc.metadata.values()), (case, exc.metadata)
    log = server.log_path.read_text()  # the server's log says where <root 0> is
    assert f"data root 0: {real} (errors name its files <root 0>/...)" in log
    assert f"refused to read {real}/imgs/class_0/img_001.jpg" in log
