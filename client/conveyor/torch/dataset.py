"""``ConveyorDataset``: a pipeline of a Conveyor server as a PyTorch ``IterableDataset``.

Each item is one batch: a tuple with one tensor per pipeline output, made from the received
buffers without a copy where the samples have one shape (a batch arrives as one buffer),
so uint8 stays uint8; outputs whose samples differ in shape come as lists of tensors.
Optionally the tensors are pinned (``pin_memory=True``, where torch has an accelerator to
pin for) and copied to ``device``.

In a data-parallel job (``rank`` / ``world_size``, by default torch.distributed's when it
is initialised) each rank's dataset yields its share of one global sequence: at every step
rank r gets the r-th of the next ``world_size`` batches of the one-rank pipeline (see
``conveyor.remote.opening``). Its state is the job's position (the step, and the global
batches before it), so a job saved at a step goes on from there with any world size.

The dataset opens its pipeline with ``Client.open`` when iteration starts, so the same code
creates the pipeline on a first start and resumes it on every later one. Its state is the
trainer's position: ``state_dict()`` says how many batches were taken, and a dataset given
that state (``load_state_dict``) resumes right after them, on any server of the list: save
it with the model (``torch.save``, torchdata's ``StatefulDataLoader``, or
``torch.distributed.checkpoint``, for which this class is ``Stateful``) and the data goes
on exactly where the model does.

The server computes the batches, so iterate in the trainer's process
(``DataLoader(dataset, batch_size=None)`` with no workers): worker processes would each
open the same pipeline and take its stream over from one another.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from conveyor.client import Checkpoint, Client
from conveyor.definition.spec import Definition, as_spec
from conveyor.errors import DataLoss, FailedPrecondition, InvalidArgument
from conveyor.remote.pipeline import RemotePipeline
from conveyor.tensor_list import TensorList
from conveyor.transport.connection import PIPELINE_HINT, server_targets

#: The version of ``state_dict()``'s layout.
STATE_VERSION = 1

try:
    import torch
    from torch.utils.data import IterableDataset, get_worker_info
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError("conveyor.torch needs PyTorch: pip install torch (its CPU build: "
                      "pip install torch --index-url https://download.pytorch.org/whl/cpu)"
                      ) from exc


class ConveyorDataset(IterableDataset):
    def __init__(self, servers: str | Sequence[str], name: str,
                 spec: Definition, *, run_id: str | None = None,
                 rank: int | None = None, world_size: int | None = None,
                 device: Any = None, pin_memory: bool = False,
                 client_options: dict[str, Any] | None = None) -> None:
        """``servers``: as ``conveyor.Client`` takes them. ``run_id``: this training run
        (see ``Client.open``). ``rank`` / ``world_size``: this trainer's share of a
        data-parallel job; unset: torch.distributed's rank and world size when its process
        group is initialised, else 0 and 1. ``device``: where the tensors go
        (``non_blocking`` copies from pinned memory when ``pin_memory``); ``pin_memory``
        needs an accelerator (FailedPrecondition otherwise). ``client_options``: more
        keyword arguments for ``conveyor.Client`` (TLS, token file, timeouts)."""
        super().__init__()
        server_targets(servers, "conveyor.torch.ConveyorDataset", hint=PIPELINE_HINT)
        self.servers, self.name, self.spec = servers, name, as_spec(spec)
        self.run_id = run_id
        self.rank, self.world_size = _share(rank, world_size)
        if pin_memory and not _can_pin():
            raise FailedPrecondition(
                f"ConveyorDataset {name!r}: pin_memory=True needs an accelerator to pin "
                "memory for, and torch has none here (torch.cuda.is_available() is False)")
        self.device = torch.device(device) if device is not None else None
        self.pin_memory = pin_memory
        self.client_options = dict(client_options or {})
        #: Batches the trainer has taken from this dataset since the pipeline began (a
        #: job's rank: the job's steps).
        self.consumed: int | None = None
        #: A job's rank: the global batches before step ``consumed`` (None: not known yet).
        self.global_batches: int | None = None
        self._pipe: RemotePipeline | None = None

    # -- iteration -------------------------------------------------------------------

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        if get_worker_info() is not None:
            raise FailedPrecondition(
                f"ConveyorDataset {self.name!r} is iterated in a DataLoader worker: the "
                "server computes the batches, so use num_workers=0 (worker processes would "
                "take the pipeline's stream over from one another)")
        with Client(self.servers, **self.client_options) as client:
            pipe = client.open(self.name, self.spec, run_id=self.run_id, rank=self.rank,
                               world_size=self.world_size, consumed=self.consumed)
            job = pipe.info.job
            if self.global_batches is not None and job.job and \
                    job.global_batches != self.global_batches:
                pipe.close()
                raise DataLoss(
                    f"ConveyorDataset {self.name!r}: the state says step {self.consumed} is "
                    f"global batch {self.global_batches}, the job has it at "
                    f"{job.global_batches}: the job went on along another history")
            self._pipe = pipe
            try:
                while True:
                    batch = pipe.run_on()  # (no stop where a source's epoch ends)
                    self.consumed = pipe.consumed
                    if job.job:
                        self.global_batches = job.global_batches + (
                            self.consumed - job.step) * job.world_size
                    yield tuple(self._tensors(out) for out in batch)
            finally:
                if self._pipe is pipe:  # (a newer iteration's pipeline stays checkpointable)
                    self._pipe = None
                pipe.close()

    def _tensors(self, out: TensorList) -> Any:
        if out.is_dense_tensor():
            return self._placed(torch.from_numpy(out.as_array()))
        return [self._placed(torch.from_numpy(sample)) for sample in out]

    def _placed(self, tensor: Any) -> Any:
        if self.pin_memory:
            tensor = tensor.pin_memory()
        if self.device is not None:
            tensor = tensor.to(self.device, non_blocking=self.pin_memory)
        return tensor

    # -- state -----------------------------------------------------------------------

    def checkpoint(self) -> Checkpoint:
        """Store the position after the batches taken so far in Redis (while iterating).
        In a job, every rank's call at one step makes that step the job's cut, from which
        ``Client.open`` and a dataset without a saved state go on."""
        pipe = self._pipe
        if pipe is None:
            raise FailedPrecondition(f"ConveyorDataset {self.name!r} is not being iterated: "
                                     "nothing to checkpoint")
        return pipe.checkpoint()

    def state_dict(self) -> dict[str, Any]:
        """The trainer's position: the batches taken so far (None: none yet, so a restore
        starts where ``open`` would); in a job, its step, the global batches before it and
        the world size that reached it."""
        return {"version": STATE_VERSION, "name": self.name, "run_id": self.run_id,
                "consumed": self.consumed, "global_batches": self.global_batches,
                "world_size": self.world_size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume after the batches ``state`` counts when iteration starts again; a job's
        state resumes at its step with this dataset's world size (any: the job goes on
        from the step's global position)."""
        version = state.get("version")
        if version != STATE_VERSION:
            raise InvalidArgument(f"ConveyorDataset state version {version!r}: this client "
                                  f"reads version {STATE_VERSION}")
        if state.get("name") != self.name:
            raise InvalidArgument(f"ConveyorDataset state is of pipeline "
                                  f"{state.get('name')!r}, not of {self.name!r}")
        consumed = state.get("consumed")
        if consumed is not None and (not isinstance(consumed, int) or consumed < 0):
            raise InvalidArgument(f"ConveyorDataset state: consumed={consumed!r} is not a "
                                  "count of batches")
        global_batches = state.get("global_batches")
        if global_batches is not None and (not isinstance(global_batches, int)
                                           or global_batches < 0):
            raise InvalidArgument(f"ConveyorDataset state: global_batches={global_batches!r}"
                                  " is not a count of batches")
        self.run_id = state.get("run_id", self.run_id)
        self.consumed = consumed
        self.global_batches = global_batches


def _share(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """``rank`` and ``world_size``, each from torch.distributed where not given (0 and 1
    without an initialised process group)."""
    import torch.distributed as dist

    grouped = dist.is_available() and dist.is_initialized()
    if rank is None:
        rank = dist.get_rank() if grouped else 0
    if world_size is None:
        world_size = dist.get_world_size() if grouped else 1
    if world_size < 1 or not 0 <= rank < world_size:
        raise InvalidArgument(f"ConveyorDataset: rank {rank} of world_size {world_size} is "
                              "not a rank of that world")
    return rank, world_size


def _can_pin() -> bool:
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        return True
    return bool(torch.cuda.is_available())
