"""Data-parallel training with Conveyor: every rank of a torchrun job reads its share of one
global sequence from Conveyor servers, and the job resumes with any number of ranks.

    torchrun --nproc-per-node=4 client/examples/ddp_train.py \\
        --servers 10.0.0.5:50051,10.0.0.6:50051 --data /data/train --job run7 \\
        --steps 1000 --save-every 100 --state /ckpt/run7.pt

Run it again after a crash with ``--nproc-per-node=3`` (or 5): it loads the model, optimizer
and data position saved at the last ``--save-every`` step, and the data goes on from that
step's global position, split among the new ranks: every sample of the epoch once, the
same global order as one rank would read.

``--record DIR`` writes the labels each rank received, per step (for tests).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from conveyor import fn, pipeline_def, types
from conveyor.torch import ConveyorDataset, crop_mirror_normalize


@pipeline_def(batch_size=4, num_threads=2, seed=7, enable_checkpointing=True)
def train_pipeline(image_dir: str) -> Any:
    jpegs, labels = fn.readers.file(file_root=image_dir, random_shuffle=True, name="reader")
    images = fn.decoders.image(jpegs, output_type=types.RGB)
    images = fn.resize(images, size=(32, 32))
    return images, labels  # uint8 on the wire; normalised on the trainer's device


def model_for(classes: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, classes))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", required=True, help="comma-separated host:port")
    parser.add_argument("--data", required=True, help="class folders, on the servers")
    parser.add_argument("--job", default="ddp-example")
    parser.add_argument("--run-id", default="run-1")
    parser.add_argument("--steps", type=int, default=20, help="stop after this step")
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--state", type=Path, required=True, help="the training state file")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--record", type=Path, help="write each rank's labels here")
    args = parser.parse_args(argv)

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device(f"cuda:{int(os.environ['LOCAL_RANK'])}" if cuda else "cpu")
    model = DistributedDataParallel(model_for(args.classes).to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    # Rank and world size come from torch.distributed; each rank may use another server.
    dataset = ConveyorDataset(args.servers.split(","), args.job, train_pipeline(args.data),
                              run_id=args.run_id, device=device, pin_memory=cuda)
    if args.state.exists():  # a restart, with the same or another number of ranks
        saved = torch.load(args.state, weights_only=True)
        model.module.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        dataset.load_state_dict(saved["data"])  # the step: the same on every rank

    seen: list[list[int]] = []
    step = dataset.consumed or 0
    for images, labels in DataLoader(dataset, batch_size=None):
        x = crop_mirror_normalize(images, mean=[124.0, 117.0, 104.0], std=[58.0, 57.0, 57.0])
        loss = nn.functional.cross_entropy(model(x), labels.long().view(-1) % args.classes)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        seen.append(labels.view(-1).tolist())
        step += 1
        if step % args.save_every == 0:
            dataset.checkpoint()  # every rank at this step: the job's cut in Redis too
            if rank == 0:
                torch.save({"model": model.module.state_dict(),
                            "optimizer": optimizer.state_dict(),
                            "data": dataset.state_dict()}, args.state)
            dist.barrier()
        if step >= args.steps:
            break
    if args.record is not None:
        args.record.mkdir(parents=True, exist_ok=True)
        (args.record / f"rank-{rank}-of-{dist.get_world_size()}.json").write_text(
            json.dumps({"first_step": step - len(seen), "labels": seen}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
