"""``ConveyorDataset``: a pipeline of a Conveyor server as a PyTorch ``IterableDataset``.

Each item is one batch: a tuple with one tensor per pipeline output, made from the received
buffers without a copy where the samples have one shape (a batch arrives as one buffer),
so uint8 stays uint8; outputs whose samples differ in shape come as lists of tensors.
Optionally the tensors are pinned and copied to ``device``.

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

from conveyor.client import Client
from conveyor.errors import FailedPrecondition, InvalidArgument
from conveyor.tensor_list import TensorList
from conveyor.v1 import pipeline_pb2

#: The version of ``state_dict()``'s layout.
STATE_VERSION = 1

try:
    import torch
    from torch.utils.data import IterableDataset, get_worker_info
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError("conveyor.torch needs PyTorch: pip install 'conveyor[torch]'") from exc


class ConveyorDataset(IterableDataset):
    def __init__(self, servers: str | Sequence[str], name: str,
                 spec: pipeline_pb2.PipelineSpec, *, run_id: str | None = None,
                 device: Any = None, pin_memory: bool = False,
                 client_options: dict[str, Any] | None = None) -> None:
        """``servers``: as ``conveyor.Client`` takes them. ``run_id``: this training run
        (see ``Client.open``). ``device``: where the tensors go (``non_blocking`` copies
        from pinned memory when ``pin_memory``). ``client_options``: more keyword
        arguments for ``conveyor.Client`` (TLS, token file, timeouts)."""
        super().__init__()
        self.servers, self.name, self.spec = servers, name, spec
        self.run_id = run_id
        self.device = torch.device(device) if device is not None else None
        self.pin_memory = pin_memory
        self.client_options = dict(client_options or {})
        #: Batches the trainer has taken from this dataset since the pipeline began.
        self.consumed: int | None = None

    # -- iteration -------------------------------------------------------------------

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        if get_worker_info() is not None:
            raise FailedPrecondition(
                f"ConveyorDataset {self.name!r} is iterated in a DataLoader worker: the "
                "server computes the batches, so use num_workers=0 (worker processes would "
                "take the pipeline's stream over from one another)")
        with Client(self.servers, **self.client_options) as client:
            pipe = client.open(self.name, self.spec, run_id=self.run_id,
                               consumed=self.consumed)
            try:
                while True:
                    batch = pipe.run()
                    self.consumed = pipe.consumed
                    yield tuple(self._tensors(out) for out in batch)
            finally:
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

    def state_dict(self) -> dict[str, Any]:
        """The trainer's position: the batches taken so far (None: none yet, so a restore
        starts where ``open`` would)."""
        return {"version": STATE_VERSION, "name": self.name, "run_id": self.run_id,
                "consumed": self.consumed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume after the batches ``state`` counts when iteration starts again."""
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
        self.run_id = state.get("run_id", self.run_id)
        self.consumed = consumed
