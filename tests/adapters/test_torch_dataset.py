"""``conveyor.torch.ConveyorDataset`` against real servers: batches as tensors without a
copy, and a state saved with the model that resumes the data exactly where the model is,
on another server after the first one died."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from conveyor.errors import FailedPrecondition, InvalidArgument
from conveyor.torch import ConveyorDataset
from conveyor_server.demo.run import rotate_pipeline
from tests.support.loaders import first_batch_error
from tests.support.resume import reference
from tests.support.servers import Start


def tensor_bytes(batch: tuple[torch.Tensor, ...]) -> list[list[tuple[str, tuple[int, ...],
                                                                      bytes]]]:
    """``tests.support.resume.batch_bytes`` of a batch of tensors (each sample as numpy sees it)."""
    return [[(str(s.numpy().dtype), s.numpy().shape, s.numpy().tobytes()) for s in out]
            for out in batch]


def test_batches_as_tensors_and_a_saved_state_resumes_exactly(
        start_server: Start, image_root: Path, tmp_path: Path) -> None:
    a, b = start_server(), start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=3)
    expected = reference(spec, 6)
    dataset = ConveyorDataset([a.address, b.address], "torch-train", spec, run_id="r1",
                              client_options={"timeout": 10})
    got = []
    for step, batch in enumerate(DataLoader(dataset, batch_size=None)):
        images, labels, _ = batch  # rotated images differ in size: a list of tensors
        assert len(images) == 3 and all(t.dtype == torch.uint8 for t in images)
        assert isinstance(labels, torch.Tensor) and labels.shape[0] == 3  # one tensor
        got.append(tensor_bytes(batch))
        if step == 3:
            break
    assert got == expected[:4]
    state = dataset.state_dict()
    assert state["consumed"] == 4 and state["run_id"] == "r1"
    torch.save({"data": state}, tmp_path / "ckpt.pt")

    a.kill()  # the trainer restarts, with its model checkpoint, and finds A gone
    resumed = ConveyorDataset([a.address, b.address], "torch-train", spec,
                              client_options={"timeout": 10})
    resumed.load_state_dict(torch.load(tmp_path / "ckpt.pt")["data"])
    assert [tensor_bytes(batch) for batch in itertools.islice(resumed, 2)] == expected[4:6]
    assert resumed.state_dict()["consumed"] == 6


def test_states_of_other_pipelines_or_versions_are_refused(image_root: Path) -> None:
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=3)
    dataset = ConveyorDataset("127.0.0.1:1", "mine", spec)
    with pytest.raises(InvalidArgument, match="not of 'mine'"):
        dataset.load_state_dict({"version": 1, "name": "other", "consumed": 3})
    with pytest.raises(InvalidArgument, match="version 7"):
        dataset.load_state_dict({"version": 7, "name": "mine", "consumed": 3})
    with pytest.raises(InvalidArgument, match="consumed=-1"):
        dataset.load_state_dict({"version": 1, "name": "mine", "consumed": -1})


def test_worker_processes_are_refused(image_root: Path) -> None:
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=3)
    dataset = ConveyorDataset("127.0.0.1:1", "mine", spec)
    raised = first_batch_error(lambda: DataLoader(dataset, batch_size=None, num_workers=1))
    assert re.search("num_workers=0", str(raised)), raised
    assert "FailedPrecondition" in repr(raised) or isinstance(raised, FailedPrecondition)


def test_an_older_iteration_closed_late_leaves_the_newer_one_checkpointable(
        start_server: Start, image_root: Path) -> None:
    """A new epoch's iteration opens while the previous one's generator is still alive (a
    traceback or a variable holds it); when that one is closed later, ``checkpoint()`` still
    stores the newer iteration's position instead of saying nothing is being iterated."""
    server = start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=3)
    expected = reference(spec, 3)
    dataset = ConveyorDataset(server.address, "torch-epochs", spec, run_id="r1",
                              client_options={"timeout": 10})
    first = iter(dataset)
    assert tensor_bytes(next(first)) == expected[0]
    second = iter(dataset)  # the next epoch goes on after the batch taken
    assert tensor_bytes(next(second)) == expected[1]
    del first  # the older generator is closed only now
    assert tensor_bytes(next(second)) == expected[2]
    assert dataset.checkpoint().batches == 3
    assert dataset.state_dict()["consumed"] == 3
    del second
