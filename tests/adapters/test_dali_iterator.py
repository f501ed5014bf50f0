"""``conveyor.dali.plugin.pytorch``: DALI's PyTorch iterators over Conveyor pipelines.

Each sample's label is its number (1..7), so a batch says which samples it holds. The
cases are DALI's (its iterator tests and the table of ``LastBatchPolicy``): epochs ended by
``reader_name`` and by ``size``, the last batch filled, dropped or cut, padded or taken
from the next epoch, shards that rotate or stick, ``auto_reset``; and ``checkpoints()``,
from which restored pipelines and a new iterator go on exactly, in process and on a
server."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from conveyor.dali import fn, pipeline_def, types
from conveyor.dali.plugin.pipelines import reader_meta_of
from conveyor.dali.plugin.pytorch import (
    DALIClassificationIterator,
    DALIGenericIterator,
    LastBatchPolicy,
    feed_ndarray,
)
from conveyor.errors import CheckpointingDisabled, InvalidArgument
from tests.support.images import make_image_folder
from tests.support.servers import Start, client

FILL, DROP, PARTIAL = LastBatchPolicy.FILL, LastBatchPolicy.DROP, LastBatchPolicy.PARTIAL
END = "end"


@pytest.fixture(scope="module")
def seven(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Seven JPEGs: the data set ``[1..7]`` of DALI's examples."""
    return make_image_folder(tmp_path_factory.mktemp("seven") / "imgs", counts=(7,))


def files_of(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob("*.jpg"))


@pipeline_def(batch_size=2, num_threads=1, seed=5, enable_checkpointing=True)
def numbered(files: list[str], pad: bool = False, shard: int = 0, shards: int = 1,
             stick: bool = False) -> Any:
    _, labels = fn.readers.file(files=files, labels=list(range(1, len(files) + 1)),
                                name="Reader", pad_last_batch=pad, shard_id=shard,
                                num_shards=shards, stick_to_shard=stick)
    return labels


def numbers(step: list[dict[str, torch.Tensor]]) -> list[list[int]]:
    return [d["label"].squeeze(-1).tolist() for d in step]


def steps(it: Any, count: int) -> list[Any]:
    """``count`` calls of ``next``: each pipeline's numbers, or END for a StopIteration."""
    out: list[Any] = []
    for _ in range(count):
        try:
            out.append(numbers(next(it)))
        except StopIteration:
            out.append(END)
    return out


def epochs(it: Any, count: int) -> list[list[list[int]]]:
    """``count`` epochs, each iterated to its end and followed by ``reset()``."""
    out = []
    for _ in range(count):
        out.append([numbers(step)[0] for step in it])
        it.reset()
    return out


# DALI's table: with [1..7] and batches of 2, each policy's last batch and the next epoch.
@pytest.mark.parametrize(("policy", "pad", "expected", "length"), [
    (FILL, True, [[[1, 2], [3, 4], [5, 6], [7, 7]], [[1, 2], [3, 4], [5, 6], [7, 7]]], 4),
    (FILL, False, [[[1, 2], [3, 4], [5, 6], [7, 1]], [[2, 3], [4, 5], [6, 7]]], 4),
    (DROP, True, [[[1, 2], [3, 4], [5, 6]], [[1, 2], [3, 4], [5, 6]]], 3),
    (DROP, False, [[[1, 2], [3, 4], [5, 6]], [[2, 3], [4, 5], [6, 7]]], 3),
    (PARTIAL, True, [[[1, 2], [3, 4], [5, 6], [7]], [[1, 2], [3, 4], [5, 6], [7]]], 4),
    (PARTIAL, False, [[[1, 2], [3, 4], [5, 6], [7]], [[2, 3], [4, 5], [6, 7], [1]]], 4),
])
def test_the_last_batch_follows_the_policy_and_the_readers_padding(
        seven: Path, policy: LastBatchPolicy, pad: bool, expected: list[Any],
        length: int) -> None:
    it = DALIGenericIterator(numbered(files_of(seven), pad), ["label"], reader_name="Reader",
                             last_batch_policy=policy)
    assert len(it) == length
    assert it.size == (7 if policy is DROP else 8)
    assert epochs(it, 2) == expected


@pytest.mark.parametrize("auto_reset", [True, "yes"])
def test_auto_reset_starts_the_next_epoch_after_the_stop(seven: Path, auto_reset: Any) -> None:
    it = DALIGenericIterator(numbered(files_of(seven), True), ["label"], reader_name="Reader",
                             auto_reset=auto_reset, last_batch_policy=PARTIAL)
    assert steps(it, 10) == [[[1, 2]], [[3, 4]], [[5, 6]], [[7]], END,
                             [[1, 2]], [[3, 4]], [[5, 6]], [[7]], END]


@pytest.mark.parametrize("auto_reset", [False, "no", None])
def test_without_auto_reset_the_epoch_stays_ended_until_reset(seven: Path,
                                                              auto_reset: Any) -> None:
    it = DALIGenericIterator(numbered(files_of(seven), True), ["label"], reader_name="Reader",
                             auto_reset=auto_reset)
    assert steps(it, 6) == [[[1, 2]], [[3, 4]], [[5, 6]], [[7, 7]], END, END]
    it.reset()
    assert steps(it, 1) == [[[1, 2]]]
    it.reset()  # before the epoch's end: nothing
    assert steps(it, 1) == [[[3, 4]]]


def test_iterating_again_resets_an_ended_epoch(seven: Path) -> None:
    it = DALIGenericIterator(numbered(files_of(seven), True), ["label"], reader_name="Reader",
                             last_batch_policy=DROP)
    assert [numbers(s) for s in it] == [[[1, 2]], [[3, 4]], [[5, 6]]]
    assert [numbers(s) for s in it] == [[[1, 2]], [[3, 4]], [[5, 6]]]


def test_shards_rotate_and_stay_in_lockstep_across_pipelines(seven: Path) -> None:
    """Shards of [1..7] over two pipelines: [1, 2, 3] and [4, 5, 6, 7]; each epoch every
    pipeline moves to the next shard, and the epoch is the larger shard's batches."""
    files = files_of(seven)
    pipes = [numbered(files, True, shard, 2) for shard in (0, 1)]
    it = DALIGenericIterator(pipes, ["label"], reader_name="Reader", auto_reset=True)
    assert len(it) == 2 and it.size == 4
    assert steps(it, 6) == [[[1, 2], [4, 5]], [[3, 3], [6, 7]], END,
                            [[4, 5], [1, 2]], [[6, 7], [3, 3]], END]
    stuck = [numbered(files, True, shard, 2, stick=True) for shard in (0, 1)]
    it = DALIGenericIterator(stuck, ["label"], reader_name="Reader", auto_reset=True,
                             last_batch_policy=PARTIAL)
    assert steps(it, 6) == [[[1, 2], [4, 5]], [[3], [6, 7]], END,
                            [[1, 2], [4, 5]], [[3], [6, 7]], END]


def test_size_ends_epochs_without_a_reader(seven: Path) -> None:
    files = files_of(seven)
    with pytest.warns(Warning, match="reader_name"):
        it = DALIGenericIterator([numbered(files), numbered(files)], ["label"], size=7,
                                 last_batch_policy=PARTIAL, auto_reset=True)
    assert len(it) == 2
    # Two pipelines of 2 samples a step: 4, then 3 of the next 4 (the second batch cut).
    assert steps(it, 3) == [[[1, 2], [1, 2]], [[3, 4], [3]], END]
    with pytest.warns(Warning):
        it = DALIGenericIterator(numbered(files), ["label"], size=5, auto_reset=True)
    assert steps(it, 4) == [[[1, 2]], [[3, 4]], [[5, 6]], END]
    # FILL without padding: the count carries over, so the next epoch is one batch shorter.
    assert steps(it, 3) == [[[7, 1]], [[2, 3]], END]


def test_without_size_or_reader_the_iterator_does_not_end(seven: Path) -> None:
    it = DALIGenericIterator(numbered(files_of(seven)), ["label"])
    assert it.size == -1 and len(it) == 0
    assert steps(it, 5) == [[[1, 2]], [[3, 4]], [[5, 6]], [[7, 1]], [[2, 3]]]


def test_dali_refuses_these_arguments_and_so_do_we(seven: Path) -> None:
    files = files_of(seven)
    with pytest.raises(ValueError, match="auto_reset"):
        DALIGenericIterator(numbered(files), ["label"], auto_reset="sometimes")
    with pytest.raises(ValueError, match="last_batch_policy"):
        DALIGenericIterator(numbered(files), ["label"], last_batch_policy="FILL")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="size and reader_name"):
        DALIGenericIterator(numbered(files), ["label"], size=7, reader_name="Reader")
    with pytest.raises(InvalidArgument, match="last_batch_padded and reader_name"):
        DALIGenericIterator(numbered(files), ["label"], reader_name="Reader",
                            last_batch_padded=True)
    with pytest.raises(InvalidArgument, match="several pipelines"):
        DALIGenericIterator([numbered(files), numbered(files)], ["label"])
    with pytest.raises(InvalidArgument, match="distinct"):
        DALIGenericIterator(numbered(files), ["label", "label"])
    with pytest.raises(InvalidArgument, match="has 1"):
        DALIGenericIterator(numbered(files), ["data", "label"])
    with pytest.raises(InvalidArgument, match="no reader of that name.*'Reader'"):
        DALIGenericIterator(numbered(files), ["label"], reader_name="reader")


def test_the_classification_iterator_gives_data_and_labels_as_dali(seven: Path) -> None:
    @pipeline_def(batch_size=3, num_threads=1, seed=2)
    def classify(root: str) -> Any:
        jpegs, labels = fn.readers.file(file_root=root, name="Reader")
        images = fn.decoders.image(jpegs, output_type=types.RGB)
        images = fn.resize(images, resize_x=16, resize_y=12)
        return images, labels

    it = DALIClassificationIterator(classify(str(seven)), reader_name="Reader")
    (batch,) = next(it)
    assert set(batch) == {"data", "label"}
    assert batch["data"].dtype == torch.uint8 and tuple(batch["data"].shape) == (3, 12, 16, 3)
    assert batch["label"].dtype == torch.int32 and tuple(batch["label"].shape) == (3, 1)
    assert len(it) == 3  # 7 samples, batches of 3, the last one filled


def test_samples_of_different_shapes_are_refused_naming_the_output(seven: Path) -> None:
    @pipeline_def(batch_size=3, num_threads=1, seed=2)
    def undecoded(root: str) -> Any:
        jpegs, labels = fn.readers.file(file_root=root)
        return jpegs, labels

    with pytest.raises(InvalidArgument, match="output 'jpegs'.*one shape"):
        DALIGenericIterator(undecoded(str(seven)), ["jpegs", "labels"])


def test_feed_ndarray_copies_a_batch_into_a_tensor(seven: Path) -> None:
    pipe = numbered(files_of(seven))
    (labels,) = pipe.run()
    target = torch.zeros((2, 1), dtype=torch.int32)
    assert feed_ndarray(labels, target) is target
    assert target.squeeze(-1).tolist() == [1, 2]
    with pytest.raises(InvalidArgument, match="int32, the tensor torch.int64"):
        feed_ndarray(labels, torch.zeros((2, 1), dtype=torch.int64))
    with pytest.raises(InvalidArgument, match="shape"):
        feed_ndarray(labels, torch.zeros((3, 1), dtype=torch.int32))


def test_without_torch_making_an_iterator_says_to_install_it() -> None:
    code = ("import sys; sys.modules['torch'] = None\n"
            "from conveyor.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy\n"
            "try:\n    DALIGenericIterator(None, ['x'])\n"
            "except ImportError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert "needs PyTorch: pip install torch" in out


# -- checkpoints ------------------------------------------------------------------------------

def expected_after(full: list[Any], cut: int) -> list[Any]:
    """What an iterator restored from a checkpoint taken after ``cut`` steps yields: the
    rest of ``full``, an epoch that ended right at the checkpoint resumed at the next
    epoch's start."""
    rest = full[cut:]
    return rest[1:] if rest and rest[0] == END else rest


@pytest.mark.parametrize("shards", [1, 2])
@pytest.mark.parametrize("pad", [True, False])
@pytest.mark.parametrize("policy", [FILL, DROP, PARTIAL])
def test_checkpoints_resume_exactly_in_process(seven: Path, policy: LastBatchPolicy,
                                               pad: bool, shards: int) -> None:
    files = files_of(seven)

    def iterator(checkpoints: list[bytes] | None = None) -> DALIGenericIterator:
        pipes = [numbered(files, pad, shard, shards,
                          checkpoint=None if checkpoints is None else checkpoints[shard])
                 for shard in range(shards)]
        return DALIGenericIterator(pipes, ["label"], reader_name="Reader", auto_reset=True,
                                   last_batch_policy=policy)

    total = 14
    full = steps(iterator(), total)
    for cut in range(0, 11):
        it = iterator()
        assert steps(it, cut) == full[:cut]
        saved = it.checkpoints()
        assert all(isinstance(c, bytes) for c in saved) and len(saved) == shards
        rest = expected_after(full, cut)
        assert steps(iterator(saved), len(rest)) == rest, f"cut after {cut} steps"


def test_a_batch_held_ahead_is_not_in_the_checkpoint(seven: Path) -> None:
    files = files_of(seven)
    for prepare in (True, False):
        it = DALIGenericIterator(numbered(files), ["label"], reader_name="Reader",
                                 prepare_first_batch=prepare)
        first = it.checkpoints()
        assert steps(it, 2) == [[[1, 2]], [[3, 4]]]
        again = DALIGenericIterator(numbered(files, checkpoint=first[0]), ["label"],
                                    reader_name="Reader")
        assert steps(again, 1) == [[[1, 2]]]


def test_checkpoints_need_checkpointing(seven: Path) -> None:
    pipe = numbered(files_of(seven), enable_checkpointing=False)
    it = DALIGenericIterator(pipe, ["label"], reader_name="Reader")
    with pytest.raises(CheckpointingDisabled, match="enable_checkpointing=True"):
        it.checkpoints()


@pytest.mark.parametrize(("shards", "pad", "stick"), [
    (1, False, False), (1, True, False), (2, True, False), (3, False, True), (3, True, True)])
def test_a_remote_readers_metadata_is_the_engines(seven: Path, shards: int, pad: bool,
                                                  stick: bool) -> None:
    pipe = numbered(files_of(seven), pad, shards - 1, shards, stick)
    assert reader_meta_of(pipe.spec, "Reader", 7) == pipe.reader_meta("Reader")


def test_over_remote_pipelines_epochs_and_checkpoints_are_the_same(
        start_server: Start, seven: Path) -> None:
    """Two shards on a server: the iterator yields what it yields in process, and remote
    pipelines restored from its checkpoints (after the server died, on another one) go on
    exactly."""
    files = files_of(seven)
    a, b = start_server(roots=[seven]), start_server(roots=[seven])

    def local() -> DALIGenericIterator:
        return DALIGenericIterator([numbered(files, False, s, 2) for s in (0, 1)], ["label"],
                                   reader_name="Reader", auto_reset=True,
                                   last_batch_policy=PARTIAL)

    full = steps(local(), 12)
    with client(a) as first:
        pipes = [first.open(f"shard-{s}", numbered(files, False, s, 2)) for s in (0, 1)]
        it = DALIGenericIterator(pipes, ["label"], reader_name="Reader", auto_reset=True,
                                 last_batch_policy=PARTIAL)
        assert len(it) == len(local())
        assert steps(it, 5) == full[:5]
        saved = it.checkpoints()
        taken = sum(step != END for step in full[:5])
        assert [c.batches for c in saved] == [taken, taken]
    a.kill()
    with client(b) as second:
        restored = [second.restore(f"shard-{s}", saved[s], via=b.address) for s in (0, 1)]
        again = DALIGenericIterator(restored, ["label"], reader_name="Reader",
                                    auto_reset=True, last_batch_policy=PARTIAL)
        rest = expected_after(full, 5)
        assert steps(again, len(rest)) == rest


def test_tensors_share_the_batch_buffer_and_keep_its_values(seven: Path) -> None:
    """No copy where the batch is one writable buffer: the tensor is a view of it."""
    pipe = numbered(files_of(seven))
    it = DALIGenericIterator(pipe, ["label"], prepare_first_batch=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns on read-only arrays: none here
        (batch,) = next(it)
    assert np.array_equal(batch["label"].numpy(), np.array([[1], [2]], dtype=np.int32))


def test_importing_the_plugin_loads_neither_torch_nor_grpc() -> None:
    code = ("from conveyor.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy\n"
            "from conveyor.dali.plugin.base_iterator import LastBatchPolicy as Same\n"
            "import sys\nassert LastBatchPolicy is Same\n"
            "print(' '.join(sorted(sys.modules)))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True, timeout=120).stdout.split())
    assert not {m for m in loaded if m.split(".")[0] in ("torch", "grpc")}
    assert "conveyor.remote.pipeline" not in loaded
