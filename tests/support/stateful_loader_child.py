"""A fresh trainer process for ``tests/adapters/test_torch_stateful_loader.py``: builds a new
``ConveyorDataset`` and torchdata ``StatefulDataLoader``, loads the loader state saved by
another process (``torch.save``), takes batches and writes each one's bytes as JSON.

``python -m tests.support.stateful_loader_child SERVERS NAME IMAGE_DIR BATCH_SIZE STATE COUNT OUT
[RANK WORLD_SIZE]``"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from conveyor.torch import ConveyorDataset
from conveyor_server.demo.pipelines import rotate_pipeline


def batch_record(batch: tuple[Any, ...]) -> list[list[list[Any]]]:
    """Each output's samples as [dtype, shape, bytes in hex]: comparable across processes."""
    return [[[str(s.numpy().dtype), list(s.numpy().shape), s.numpy().tobytes().hex()]
             for s in out] for out in batch]


def main(argv: list[str]) -> None:
    servers, name, image_dir, batch_size, state, count, out = argv[:7]
    rank, world_size = (int(argv[7]), int(argv[8])) if len(argv) > 7 else (None, None)
    dataset = ConveyorDataset(servers.split(","), name,
                              rotate_pipeline(image_dir, batch_size=int(batch_size)),
                              rank=rank, world_size=world_size, client_options={"timeout": 10})
    loader = StatefulDataLoader(dataset, batch_size=None)
    loader.load_state_dict(torch.load(state, weights_only=True))
    batches = [batch_record(b) for b in itertools.islice(loader, int(count))]
    Path(out).write_text(json.dumps({"batches": batches,
                                     "data": loader.state_dict()["dataset_state"]}))


if __name__ == "__main__":
    main(sys.argv[1:])
