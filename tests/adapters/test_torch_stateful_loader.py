"""``ConveyorDataset`` under torchdata's ``StatefulDataLoader``, against real servers and a
real Redis: the loader's ``state_dict()`` saved mid-epoch (``torch.save``) and loaded by a
fresh loader and dataset in a fresh process gives the batches of the uninterrupted run,
byte for byte; the same for a data-parallel job's rank; worker processes are refused
clearly, so no loader state from a worker is ever saved."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from conveyor.errors import FailedPrecondition
from conveyor.torch import ConveyorDataset
from conveyor_server.demo.run import rotate_pipeline
from tests.support.loaders import first_batch_error
from tests.support.resume import reference
from tests.support.servers import Start
from tests.support.stateful_loader_child import batch_record

# torchdata 0.11.0 calls torch.set_vital, which torch 2.13 deprecates with a UserWarning.
pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")

OPTIONS = {"timeout": 10}
ROOT = Path(__file__).resolve().parents[2]


def taken(stream: Iterator[Any], count: int) -> list[Any]:
    return [batch_record(next(stream)) for _ in range(count)]


def records(expected: list[Any]) -> list[Any]:
    """``reference`` batches as ``batch_record`` writes them."""
    return [[[[dtype, list(shape), data.hex()] for dtype, shape, data in out] for out in b]
            for b in expected]


def resume_in_a_fresh_process(tmp_path: Path, servers: list[str], name: str,
                              image_dir: Path, batch_size: int, state: dict[str, Any],
                              count: int, *share: int) -> dict[str, Any]:
    """Save ``state`` with ``torch.save``; a new process loads it into a new loader and
    dataset and takes ``count`` batches: what it received, and its loader's dataset state."""
    torch.save(state, tmp_path / "loader.pt")
    out = tmp_path / "resumed.json"
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.stateful_loader_child", ",".join(servers), name,
         str(image_dir), str(batch_size), str(tmp_path / "loader.pt"), str(count), str(out),
         *map(str, share)], cwd=ROOT, capture_output=True, text=True, timeout=120,
        check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    resumed: dict[str, Any] = json.loads(out.read_text())
    return resumed


def test_a_loader_state_saved_mid_epoch_resumes_exactly_in_a_fresh_process(
        start_server: Start, image_root: Path, tmp_path: Path) -> None:
    a, b = start_server(), start_server()
    servers = [a.address, b.address]
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=3)
    expected = reference(spec, 7)
    dataset = ConveyorDataset(servers, "stateful", spec, run_id="r1", client_options=OPTIONS)
    loader = StatefulDataLoader(dataset, batch_size=None)
    stream = iter(loader)
    assert taken(stream, 4) == records(expected[:4])
    state = loader.state_dict()  # mid-epoch: 4 of the 48 images' 16 batches
    assert state["dataset_state"]["consumed"] == 4
    assert state["dataset_state"]["run_id"] == "r1"
    uninterrupted = taken(stream, 3)
    taken(stream, 2)  # the trainer ran on past its saved state, then died
    del stream
    assert uninterrupted == records(expected[4:7])

    resumed = resume_in_a_fresh_process(tmp_path, servers, "stateful",
                                        image_root / "imgs", 3, state, 3)
    assert resumed["batches"] == uninterrupted
    assert resumed["data"]["consumed"] == 7


def test_a_jobs_rank_resumes_through_the_loader_in_a_fresh_process(
        start_server: Start, image_root: Path, tmp_path: Path) -> None:
    a, b = start_server(), start_server()
    servers = [a.address, b.address]
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    expected = reference(spec, 2 * 5)
    loaders = [StatefulDataLoader(ConveyorDataset(servers, "stateful-job", spec, run_id="j",
                                                  rank=r, world_size=2,
                                                  client_options=OPTIONS), batch_size=None)
               for r in range(2)]
    streams = [iter(loader) for loader in loaders]
    steps = [[batch_record(next(s)) for s in streams] for _ in range(3)]
    # Rank r's step s is global batch 2s + r of the one-rank pipeline.
    assert [step[r] for step in steps for r in range(2)] == records(expected[:6])
    state = loaders[1].state_dict()
    assert (state["dataset_state"]["consumed"], state["dataset_state"]["global_batches"],
            state["dataset_state"]["world_size"]) == (3, 6, 2)
    uninterrupted = taken(streams[1], 2)
    taken(streams[1], 1)  # ran on past the saved state, then died
    del streams
    assert uninterrupted == records([expected[7], expected[9]])

    resumed = resume_in_a_fresh_process(tmp_path, servers, "stateful-job",
                                        image_root / "imgs", 2, state, 2, 1, 2)
    assert resumed["batches"] == uninterrupted
    assert (resumed["data"]["consumed"], resumed["data"]["global_batches"]) == (5, 10)


@pytest.mark.parametrize("workers", [1, 2])
def test_worker_processes_are_refused_clearly(image_root: Path, workers: int) -> None:
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=3)
    raised = first_batch_error(lambda: StatefulDataLoader(
        ConveyorDataset("127.0.0.1:1", "mine", spec), batch_size=None, num_workers=workers))
    assert isinstance(raised, FailedPrecondition), repr(raised)
    assert re.search("num_workers=0", str(raised)), raised
