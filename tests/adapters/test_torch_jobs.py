"""``ConveyorDataset`` as a data-parallel job's rank, against real servers: each rank's
tensors are its share of the one-rank sequence, its state is the job's position, and a
state saved by a two-rank job resumes with three ranks; rank and world size come from
torch.distributed; pinned memory where torch can pin, a clear refusal where it cannot."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from conveyor.errors import DataLoss, FailedPrecondition
from conveyor.torch import ConveyorDataset
from conveyor.torch.dataset import _can_pin
from conveyor_server.demo.run import rotate_pipeline
from tests.adapters.test_torch_dataset import tensor_bytes
from tests.support.resume import reference
from tests.support.servers import Start

OPTIONS = {"timeout": 10}


def test_ranks_state_and_resume_with_another_world_size(start_server: Start,
                                                        image_root: Path) -> None:
    a, b = start_server(), start_server()
    servers = [a.address, b.address]
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    expected = reference(spec, 2 * 3 + 3 * 3)
    two = [ConveyorDataset([servers[r], servers[1 - r]], "torch-job", spec, run_id="t",
                           rank=r, world_size=2, client_options=OPTIONS) for r in range(2)]
    streams = [iter(d) for d in two]
    history = [tensor_bytes(next(s)) for _ in range(3) for s in streams]
    states = [d.state_dict() for d in two]
    assert [(s["consumed"], s["global_batches"], s["world_size"]) for s in states] == [
        (3, 6, 2), (3, 6, 2)]
    two[0].checkpoint()  # one rank only: the job's cut stays at step 0
    next(streams[0])  # ran on past the saved state, then died

    three = [ConveyorDataset(servers, "torch-job", spec, rank=r, world_size=3,
                             client_options=OPTIONS) for r in range(3)]
    for d in three:
        d.load_state_dict(states[0])  # rank 0's state: the step is every rank's
    streams = [iter(d) for d in three]
    history += [tensor_bytes(next(s)) for _ in range(3) for s in streams]
    assert history == expected
    assert three[2].state_dict()["global_batches"] == 6 + 3 * 3

    stale = ConveyorDataset(servers, "torch-job", spec, rank=0, world_size=3,
                            client_options=OPTIONS)
    stale.load_state_dict({**states[0], "global_batches": 5})
    with pytest.raises(DataLoss, match="another history"):
        next(iter(stale))


def test_rank_and_world_size_come_from_torch_distributed(image_root: Path,
                                                         tmp_path: Path) -> None:
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    alone = ConveyorDataset("127.0.0.1:1", "d", spec)
    assert (alone.rank, alone.world_size) == (0, 1)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'group'}", rank=0,
                            world_size=1)
    try:
        grouped = ConveyorDataset("127.0.0.1:1", "d", spec)
        assert (grouped.rank, grouped.world_size) == (dist.get_rank(), dist.get_world_size())
        given = ConveyorDataset("127.0.0.1:1", "d", spec, rank=3, world_size=4)
        assert (given.rank, given.world_size) == (3, 4)
        # torch.distributed.checkpoint saves and loads the position (the class is Stateful);
        # the world size is the loading dataset's own.
        given.consumed, given.global_batches = 7, 25
        dcp.save({"data": given}, checkpoint_id=str(tmp_path / "dcp"))
        dcp.load({"data": grouped}, checkpoint_id=str(tmp_path / "dcp"))
        assert (grouped.consumed, grouped.global_batches, grouped.world_size) == (7, 25, 1)
    finally:
        dist.destroy_process_group()
    with pytest.raises(Exception, match="rank 4 of world_size 4"):
        ConveyorDataset("127.0.0.1:1", "d", spec, rank=4, world_size=4)


def test_pinned_memory_where_torch_can_pin(start_server: Start, image_root: Path) -> None:
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    if not _can_pin():
        assert not torch.cuda.is_available()
        with pytest.raises(FailedPrecondition, match="pin_memory=True needs an accelerator"):
            ConveyorDataset("127.0.0.1:1", "pinned", spec, pin_memory=True)
    server = start_server()
    dataset = ConveyorDataset(server.address, "pinned", spec, pin_memory=_can_pin(),
                              device="cpu", client_options=OPTIONS)
    _, labels, angles = next(iter(dataset))
    assert labels.device.type == "cpu" and angles.device.type == "cpu"
    assert labels.is_pinned() == _can_pin()
    assert tensor_bytes((labels,)) == reference(spec, 1)[0][1:2]
