"""Data identity: a restore over changed data is refused, naming the first changed file;
a file that changed size since it was listed is DATA_LOSS naming it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from conveyor import errors, fn, pipeline_def, types
from conveyor.errors import CheckpointMismatch, DataFileError
from conveyor_server import Pipeline
from conveyor_server.engine.data.file_list import FileEntry
from conveyor_server.engine.data.identity import DataIdentity
from conveyor_server.engine.data.listings import MemoryListings
from tests.support.images import make_image_folder
from tests.support.resume import batch_bytes, run_batches
from tests.support.servers import Start, client


@pipeline_def(batch_size=4, num_threads=2, seed=5, enable_checkpointing=True)
def reading(root: str, verify: str = "metadata") -> Any:
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="reader",
                                    verify=verify)
    return fn.decoders.image(jpegs, output_type=types.RGB), labels


def rewrite_keeping_size(path: Path, *, keep_mtime: bool = False) -> None:
    """Overwrite a file with other bytes of the same size (a data edit in place)."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    else:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_an_edit_in_place_is_refused_naming_the_file(tmp_path: Path) -> None:
    root = make_image_folder(tmp_path / "imgs", counts=(3, 3))
    spec = reading(str(root))
    listings = MemoryListings()
    blob = Pipeline(spec, listings=listings).checkpoint()
    rewrite_keeping_size(root / "class_1" / "img_002.jpg")
    with pytest.raises(CheckpointMismatch, match=r"data set changed.*first change: file 5 "
                       r"'[^']*class_1/img_002\.jpg' changed \(modification time\)"):
        Pipeline(spec, checkpoint=blob, listings=listings)
    # Without the earlier listing the refusal stands, without the file's name.
    with pytest.raises(CheckpointMismatch, match="modification time or contents"):
        Pipeline(spec, checkpoint=blob)


def test_verify_content_ignores_times_and_catches_edits_that_keep_them(tmp_path: Path) -> None:
    root = make_image_folder(tmp_path / "imgs", counts=(3, 3))
    spec = reading(str(root), verify="content")
    listings = MemoryListings()
    with Pipeline(spec, listings=listings) as pipe:
        run_batches(pipe, 1)
        blob = pipe.checkpoint()
        expected = batch_bytes(pipe.run())
    for path in root.rglob("*.jpg"):  # copied with new times, same contents
        os.utime(path, ns=(1, 1))
    with Pipeline(spec, checkpoint=blob, listings=listings) as restored:
        assert batch_bytes(restored.run()) == expected
    rewrite_keeping_size(root / "class_0" / "img_001.jpg", keep_mtime=True)
    with pytest.raises(CheckpointMismatch, match=r"img_001\.jpg' changed \(contents\)"):
        Pipeline(spec, checkpoint=blob, listings=listings)


def test_a_file_that_changed_size_since_the_listing_is_data_loss(tmp_path: Path) -> None:
    root = make_image_folder(tmp_path / "imgs", counts=(4,))
    with Pipeline(reading(str(root))) as pipe:
        victim = root / "class_0" / "img_000.jpg"
        victim.write_bytes(victim.read_bytes() + b"\0" * 10)
        with pytest.raises(DataFileError, match=r"img_000\.jpg' has \d+ bytes, but \d+ when "
                           "the pipeline listed it"):
            pipe.run()


def test_first_change_names_added_removed_resized_and_relabelled_files() -> None:
    entries = [FileEntry(f"/d/{i}.jpg", 10 + i, i % 2, 7) for i in range(4)]
    listing = DataIdentity(entries, "metadata").listing()

    def change(new: list[FileEntry]) -> str:
        return DataIdentity(new, "metadata").first_change(listing)

    assert change(entries) == "no file differs from the earlier listing"
    assert change([*entries, FileEntry("/d/9.jpg", 1, 0, 7)]) == "file 4 '/d/9.jpg' was added"
    assert change(entries[:3]) == "file 3 '/d/3.jpg' was removed"
    assert change([entries[0], FileEntry("/d/1.jpg", 99, 0, 7), *entries[2:]]) == \
        "file 1 '/d/1.jpg' changed (size 11 -> 99, label 1 -> 0)"
    assert "is now '/d/2.jpg', was '/d/1.jpg'" in change([entries[0], *entries[2:]])
    touched = [FileEntry(e.path, e.size, e.label, 8) for e in entries]
    assert DataIdentity(touched, "metadata").digest != DataIdentity(entries, "metadata").digest


def test_a_restore_on_another_server_names_the_changed_file(
        start_server: Start, tmp_path: Path) -> None:
    root = make_image_folder(tmp_path / "root" / "imgs", counts=(3, 3))
    a, b = start_server(roots=[tmp_path / "root"]), start_server(roots=[tmp_path / "root"])
    spec = reading(str(root))
    with client(a) as ca, client(b) as cb:
        pipe = ca.create("edited", spec)
        pipe.run()
        saved = pipe.checkpoint()
        rewrite_keeping_size(root / "class_0" / "img_000.jpg")
        with pytest.raises(errors.DataChanged,
                           match=r"first change: file 0 '[^']*class_0/img_000\.jpg' changed"):
            cb.restore("edited", checkpoint=saved.id)
