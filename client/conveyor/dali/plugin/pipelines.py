"""The pipelines an iterator wraps, in process or on a server, behind one face.

``Wrapped`` takes either an in-process ``conveyor.definition.pipeline.Pipeline`` (what a
``@pipeline_def`` function returns) or a ``RemotePipeline`` (``Client.open``, ``create``,
``restore``) and gives what an iterator needs of it: the next batch, how many batches it
has returned since its start, a checkpoint at a given count, the batch size, the devices
of its outputs and the metadata of a reader. A remote pipeline's reader metadata comes
from its spec and the epoch sizes its server reports (``reader_meta_of``), the values the
engine's readers give in process.

Imports no gRPC: a remote pipeline is recognised by what it has, not by its class.
"""

from __future__ import annotations

from typing import Any

from conveyor.dali.plugin.epochs import shard_sizes
from conveyor.definition.pipeline import Pipeline
from conveyor.definition.schemas.registry import decode_args
from conveyor.errors import InvalidArgument
from conveyor.tensor_list import TensorList
from conveyor.v1 import pipeline_pb2

Batch = tuple[TensorList, ...]
#: The devices whose outputs DALI's iterators give as GPU tensors.
GPU_DEVICES = ("gpu", "mixed")


def reader_meta_of(spec: pipeline_pb2.PipelineSpec, name: str,
                   epoch_size: int) -> dict[str, Any]:
    """The metadata of the reader ``name`` of ``spec`` with ``epoch_size`` samples, as
    ``Pipeline.reader_meta(name)`` gives it: a padded shard is the largest shard rounded
    up to whole batches (``engine/stages/file_reader.py``)."""
    op = reader_op(spec, name)
    args = decode_args(op)
    shards, pad = int(args["num_shards"]), bool(args["pad_last_batch"])
    largest = max(shard_sizes(epoch_size, shards))
    batch = spec.batch_size
    per_shard = -(-largest // batch) * batch if pad else -(-epoch_size // shards)
    return {
        "epoch_size": epoch_size,
        "epoch_size_padded": shards * per_shard,
        "number_of_shards": shards,
        "shard_id": int(args["shard_id"]),
        "pad_last_batch": pad,
        "stick_to_shard": bool(args["stick_to_shard"]),
    }


def reader_op(spec: pipeline_pb2.PipelineSpec, name: str) -> pipeline_pb2.OpSpec:
    readers = [op for op in spec.ops if op.type.startswith("readers.")]
    for op in readers:
        if op.name == name:
            return op
    named = sorted(op.name for op in readers if op.name)
    raise InvalidArgument(
        f"reader_name={name!r}: the pipeline has no reader of that name (its named readers: "
        f"{', '.join(map(repr, named)) or 'none'}; name one with fn.readers.file(..., "
        f"name={name!r}))")


class Wrapped:
    """One pipeline an iterator takes batches from."""

    def __init__(self, pipe: Any) -> None:
        self.pipe = pipe
        if isinstance(pipe, Pipeline):
            self.remote = False
        elif all(hasattr(pipe, a) for a in ("run", "consumed", "info", "checkpoint")):
            self.remote = True  # a RemotePipeline (not imported: that would load gRPC)
        else:
            raise InvalidArgument(
                f"the iterator takes pipelines made by a @pipeline_def function or "
                f"RemotePipelines (Client.open), not {type(pipe).__name__}")

    @property
    def spec(self) -> pipeline_pb2.PipelineSpec:
        spec: pipeline_pb2.PipelineSpec = self.pipe.info.spec if self.remote else self.pipe.spec
        return spec

    @property
    def batch_size(self) -> int:
        return self.spec.batch_size

    @property
    def checkpointing(self) -> bool:
        return bool(self.spec.enable_checkpointing)

    @property
    def device_id(self) -> int | None:
        device = self.spec.device_id
        return device if device >= 0 else None

    def output_on_gpu(self) -> list[bool]:
        """For each output: whether an operator on the GPU makes it."""
        spec = self.spec
        return [spec.ops[ref.op].device in GPU_DEVICES for ref in spec.outputs]

    def build(self) -> None:
        if not self.remote:
            self.pipe.build()

    def run(self) -> Batch:
        batch: Batch = self.pipe.run()
        return batch

    def reset(self) -> None:
        """After the pipeline raised StopIteration: its next epoch."""
        self.pipe.reset()

    @property
    def position(self) -> int:
        """Batches returned since the pipeline's start (a restored one: its checkpoint's
        position included)."""
        return int(self.pipe.consumed if self.remote else self.pipe.batches_returned)

    def checkpoint(self, batches: int) -> Any:
        """The checkpoint after ``batches`` batches: bytes in process, a stored
        ``Checkpoint`` for a remote pipeline."""
        if self.remote:
            return self.pipe.checkpoint(consumed=batches)
        return self.pipe.checkpoint(batches=batches)

    def reader_meta(self, name: str) -> dict[str, Any]:
        if not self.remote:
            reader_op(self.spec, name)  # an unknown name: the iterator's own message
            meta: dict[str, Any] = self.pipe.reader_meta(name)
            return meta
        sizes = self.pipe.info.epoch_sizes
        if name not in sizes:
            reader_op(self.spec, name)
            sizes = self.pipe.describe().epoch_sizes
        return reader_meta_of(self.spec, name, int(sizes[name]))
