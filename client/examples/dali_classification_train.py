"""Image classification trained from a DALI pipeline and DALI's PyTorch iterator, ported
to Conveyor: DALI's PyTorch ResNet-50 example (``docs/examples/use_cases/pytorch/resnet50``),
whose pipeline functions and iterator use are DALI's as they are, only the imports saying
``conveyor.dali`` instead of ``nvidia.dali``.

    python client/examples/dali_classification_train.py DATA --epochs 2 -b 32 -j 4
    python client/examples/dali_classification_train.py DATA --dali_cpu ...
    python client/examples/dali_classification_train.py DATA --server HOST:PORT ...
    python client/examples/dali_classification_train.py DATA --cpu-only ...

``DATA`` holds ``train/`` and ``val/``, each in class folders (or give both folders). As
DALI's, the pipeline decodes on the GPU (``device="mixed"``), or on the CPU with
``--dali_cpu``, and hands its outputs to the GPU (``.gpu()``): it needs a GPU where it runs.
``--cpu-only`` (Conveyor's, for machines without a GPU) runs ``create_cpu_pipeline``
instead: the same operators with ``--dali_cpu``'s devices and no transfer to the GPU.
With ``--server`` the pipelines run on a Conveyor server (``DATA`` is then a path on the
server) and stream to this process; without it they run in this process. ``--checkpoint
FILE`` saves the model, the optimizer and the iterator's checkpoints at every epoch's end
and every ``--save-every`` steps; ``--resume FILE`` goes on from them exactly. ``--steps N``
stops after N training steps (a short run, as DALI's ``--test``).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from conveyor.dali import fn, types
from conveyor.dali.pipeline import pipeline_def
from conveyor.dali.plugin.pytorch import DALIClassificationIterator, LastBatchPolicy

#: The crop and the validation resize (DALI's example: 224 and 256, for ResNet-50).
CROP_SIZE, VAL_SIZE = 64, 72


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="PyTorch classification training")
    parser.add_argument("data", nargs="+", help="DATA with train/ and val/, or both folders")
    parser.add_argument("-j", "--workers", default=2, type=int, help="pipeline threads")
    parser.add_argument("--epochs", default=2, type=int)
    parser.add_argument("-b", "--batch-size", default=8, type=int)
    parser.add_argument("--lr", default=0.05, type=float)
    parser.add_argument("--classes", default=10, type=int)
    parser.add_argument("--print-freq", default=10, type=int)
    parser.add_argument("--dali_cpu", action="store_true",
                        help="decode and resize on the CPU (the outputs still go to the GPU)")
    parser.add_argument("--cpu-only", action="store_true",
                        help="no GPU: the pipeline without .gpu(), the model on the CPU")
    parser.add_argument("--deterministic", action="store_true",
                        help="deterministic cuDNN kernels (a resumed run's exact losses)")
    parser.add_argument("--steps", default=-1, type=int, help="stop after this many steps")
    parser.add_argument("--save-every", default=0, type=int, help="steps between checkpoints")
    parser.add_argument("--checkpoint", default="", help="where to save the training state")
    parser.add_argument("--resume", default="", help="a saved training state to go on from")
    parser.add_argument("--server", default="", help="run the pipelines on this server")
    parser.add_argument("--run-id", default="run-1", help="the run's id on the server")
    return parser.parse_args(argv)


# -- DALI's pipeline, as DALI's example writes it -------------------------------------------


def image_processing_func(images: Any, crop: int, size: int, is_training: bool = True,
                          decoder_device: str = "mixed") -> Any:
    # Buffer hints for the GPU's hardware JPEG decoder (accepted and ignored by Conveyor).
    preallocate_width_hint = 5980 if decoder_device == "mixed" else 0
    preallocate_height_hint = 6430 if decoder_device == "mixed" else 0
    if is_training:
        images = fn.decoders.image_random_crop(
            images,
            device=decoder_device,
            output_type=types.RGB,
            preallocate_width_hint=preallocate_width_hint,
            preallocate_height_hint=preallocate_height_hint,
            random_aspect_ratio=[0.8, 1.25],
            random_area=[0.1, 1.0],
            num_attempts=100,
        )
        images = fn.resize(
            images,
            resize_x=crop,
            resize_y=crop,
            interp_type=types.INTERP_TRIANGULAR,
        )
        mirror = fn.random.coin_flip(probability=0.5)
    else:
        images = fn.decoders.image(images, device=decoder_device, output_type=types.RGB)
        images = fn.resize(
            images,
            size=size,
            mode="not_smaller",
            interp_type=types.INTERP_TRIANGULAR,
        )
        mirror = False

    images = fn.crop_mirror_normalize(
        images.gpu(),
        dtype=types.FLOAT,
        output_layout="CHW",
        crop=(crop, crop),
        mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
        std=[0.229 * 255, 0.224 * 255, 0.225 * 255],
        mirror=mirror,
    )
    return images


@pipeline_def(exec_dynamic=True)
def create_dali_pipeline(data_dir: str, crop: int, size: int, shard_id: int,
                         num_shards: int, dali_cpu: bool = False,
                         is_training: bool = True) -> Any:
    images, labels = fn.readers.file(
        file_root=data_dir,
        shard_id=shard_id,
        num_shards=num_shards,
        random_shuffle=is_training,
        pad_last_batch=True,
        name="Reader",
    )
    decoder_device = "cpu" if dali_cpu else "mixed"
    images = image_processing_func(images, crop, size, is_training, decoder_device)
    return images, labels.gpu()


# -- Conveyor's addition: the same pipeline where there is no GPU ---------------------------


@pipeline_def(exec_dynamic=True)
def create_cpu_pipeline(data_dir: str, crop: int, size: int, shard_id: int,
                        num_shards: int, is_training: bool = True) -> Any:
    """``create_dali_pipeline`` with ``dali_cpu=True`` and its data left on the CPU: the
    operators DALI's example runs on the GPU run on the CPU, without ``.gpu()``."""
    images, labels = fn.readers.file(file_root=data_dir, shard_id=shard_id,
                                     num_shards=num_shards, random_shuffle=is_training,
                                     pad_last_batch=True, name="Reader")
    if is_training:
        images = fn.decoders.image_random_crop(images, device="cpu", output_type=types.RGB,
                                               random_aspect_ratio=[0.8, 1.25],
                                               random_area=[0.1, 1.0], num_attempts=100)
        images = fn.resize(images, resize_x=crop, resize_y=crop,
                           interp_type=types.INTERP_TRIANGULAR)
        mirror = fn.random.coin_flip(probability=0.5)
    else:
        images = fn.decoders.image(images, device="cpu", output_type=types.RGB)
        images = fn.resize(images, size=size, mode="not_smaller",
                           interp_type=types.INTERP_TRIANGULAR)
        mirror = False
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                      crop=(crop, crop),
                                      mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                      std=[0.229 * 255, 0.224 * 255, 0.225 * 255],
                                      mirror=mirror)
    return images, labels


def create_model(classes: int) -> nn.Module:
    """A small convolutional network (DALI's example trains torchvision's ResNet-50)."""
    return nn.Sequential(nn.Conv2d(3, 16, 3, stride=2), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, stride=2), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes))


def pipeline(args: argparse.Namespace, **kwargs: Any) -> Any:
    """DALI's pipeline (``--dali_cpu`` as DALI's), or without a GPU (``--cpu-only``) the
    one that keeps its data on the CPU."""
    if args.cpu_only:
        return create_cpu_pipeline(**kwargs)
    return create_dali_pipeline(dali_cpu=args.dali_cpu, **kwargs)


def device_of(args: argparse.Namespace, local_rank: int) -> torch.device:
    """Where the model trains: the GPU the pipeline's outputs are on, as DALI's example
    (``model.cuda()``), or the CPU with ``--cpu-only``."""
    if args.cpu_only or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", local_rank)


def hosted(pipe: Any, name: str, client: Any, run_id: str, saved: Any = None) -> Any:
    """The pipeline where it runs: in this process (no client), or on the client's server,
    opened, or restored from the iterator's checkpoint ``saved``."""
    if client is None:
        return pipe
    if saved is not None:
        return client.restore(name, saved)
    return client.open(name, pipe, run_id=run_id)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Train; returns what each step saw (labels, losses) and the epochs run."""
    args = parse(argv)
    if not args.server:
        return run(args, None)
    import conveyor

    with conveyor.Client(args.server) as client:
        return run(args, client)


def run(args: argparse.Namespace, client: Any) -> dict[str, Any]:
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.manual_seed(local_rank)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    traindir, valdir = ((os.path.join(args.data[0], "train"), os.path.join(args.data[0], "val"))
                        if len(args.data) == 1 else (args.data[0], args.data[1]))
    if args.deterministic:
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
    device = device_of(args, local_rank)
    model = create_model(args.classes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    start_epoch, saved = 0, None
    if args.resume:
        state = torch.load(args.resume, weights_only=False, map_location=device)
        model.load_state_dict(state["state_dict"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch, saved = state["epoch"], state["data"]

    crop_size, val_size = CROP_SIZE, VAL_SIZE
    restored = saved if saved is not None and not args.server else None
    train_pipe = pipeline(args, batch_size=args.batch_size, num_threads=args.workers,
                          device_id=local_rank, seed=12 + local_rank, data_dir=traindir,
                          crop=crop_size, size=val_size, shard_id=local_rank,
                          num_shards=world_size, is_training=True,
                          enable_checkpointing=True, checkpoint=restored)
    train_pipe = hosted(train_pipe, f"train-{local_rank}", client, args.run_id, saved)
    train_pipe.build()
    train_loader = DALIClassificationIterator(
        train_pipe,
        reader_name="Reader",
        last_batch_policy=LastBatchPolicy.PARTIAL,
        auto_reset=True,
    )

    val_pipe = pipeline(args, batch_size=args.batch_size, num_threads=args.workers,
                        device_id=local_rank, seed=12 + local_rank, data_dir=valdir,
                        crop=crop_size, size=val_size, shard_id=local_rank,
                        num_shards=world_size, is_training=False,
                        enable_checkpointing=True)
    val_pipe = hosted(val_pipe, f"val-{local_rank}", client, args.run_id)
    val_pipe.build()
    val_loader = DALIClassificationIterator(
        val_pipe,
        reader_name="Reader",
        last_batch_policy=LastBatchPolicy.PARTIAL,
        auto_reset=True,
    )

    seen: dict[str, Any] = {"labels": [], "losses": [], "epochs": [], "top1": []}
    step = 0
    for epoch in range(start_epoch, args.epochs):
        done = train(train_loader, model, criterion, optimizer, epoch, args, seen, step)
        step += done
        if args.steps >= 0 and step >= args.steps:
            break
        seen["epochs"].append(epoch)
        seen["top1"].append(validate(val_loader, model))
        if args.checkpoint:
            save(args.checkpoint, epoch + 1, model, optimizer, train_loader)
    return seen


def train(loader: Any, model: nn.Module, criterion: nn.Module, optimizer: Any, epoch: int,
          args: argparse.Namespace, seen: dict[str, Any], done_before: int) -> int:
    model.train()
    end = time.time()
    steps = 0
    for i, data in enumerate(loader):
        images = data[0]["data"]
        target = data[0]["label"].squeeze(-1).long()
        loader_len = math.ceil(loader._size / args.batch_size)
        loss = criterion(model(images), target % args.classes)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        seen["labels"].append(target.tolist())
        seen["losses"].append(loss.item())
        steps += 1
        if i % args.print_freq == 0:
            print(f"Epoch: [{epoch}][{i}/{loader_len}]\tTime {time.time() - end:.3f}\t"
                  f"Loss {loss.item():.4f}")
            end = time.time()
        if args.checkpoint and args.save_every and (done_before + steps) % args.save_every == 0:
            save(args.checkpoint, epoch, model, optimizer, loader)
        if 0 <= args.steps <= done_before + steps:
            break
    return steps


def validate(loader: Any, model: nn.Module) -> float:
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for data in loader:
            target = data[0]["label"].squeeze(-1).long()
            predicted = model(data[0]["data"]).argmax(1)
            correct += int((predicted == target).sum())
            total += target.numel()
    print(f" * Prec@1 {100.0 * correct / max(total, 1):.3f}")
    return correct / max(total, 1)


def save(path: str, epoch: int, model: nn.Module, optimizer: Any, loader: Any) -> None:
    """The training state, with the data's position: the iterator's checkpoints."""
    torch.save({"epoch": epoch, "state_dict": model.state_dict(),
                "optimizer": optimizer.state_dict(), "data": loader.checkpoints()[0]}, path)


if __name__ == "__main__":
    main()
