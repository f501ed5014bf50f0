"""DALI's ``nvidia.dali.plugin.pytorch``: ``DALIGenericIterator``,
``DALIClassificationIterator``, ``DALIRaggedIterator``, ``LastBatchPolicy`` and
``feed_ndarray``, over Conveyor pipelines in this process or on a server.

Each step yields a list with one dict per wrapped pipeline, output name -> torch tensor
(the batch stacked: its samples need one shape, as DALI's iterator requires). A batch is
the received buffer itself where it can be (no copy); an output made by an operator on the
GPU (``device="gpu"`` or ``"mixed"``) is put on ``cuda:<device_id>`` where torch has CUDA,
as DALI gives it. ``DALIRaggedIterator`` gives outputs whose samples differ in shape too:
as a list of tensors, one per sample, or as a sparse COO tensor. Epochs, resets, ``len()``,
``size`` and ``checkpoints()`` are ``base_iterator``'s. Labels keep their shape
(``(batch, 1)`` from a file reader), as DALI's: ``data[0]["label"].squeeze(-1).long()``
gives class indices.

torch is imported when an iterator is made: this module imports without it. A package,
as DALI's: ``experimental.proxy`` (DALI's ``DALIServer`` and proxy ``DataLoader``) imports
and, when used, raises ``NotSupported`` naming what to use instead.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from conveyor.dali.plugin.base_iterator import BaseIterator, IteratorArgumentError
from conveyor.dali.plugin.epochs import LastBatchPolicy
from conveyor.dali.plugin.pipelines import Batch
from conveyor.errors import InvalidArgument
from conveyor.tensor_list import TensorList

__all__ = ["DALIClassificationIterator", "DALIGenericIterator", "DALIRaggedIterator",
           "LastBatchPolicy", "feed_ndarray"]


def _torch() -> Any:
    try:
        return importlib.import_module("torch")
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
        raise ImportError("conveyor.dali.plugin.pytorch needs PyTorch: pip install torch "
                          "(its CPU build: pip install torch --index-url "
                          "https://download.pytorch.org/whl/cpu)") from None


def _array(data: Any, what: str) -> np.ndarray:
    """A ``TensorList``'s samples as one array (or an array as it is)."""
    if isinstance(data, TensorList):
        if not data.is_dense_tensor():
            raise InvalidArgument(
                f"{what}: its samples differ in shape ({sorted(set(data.shape()))}); the "
                "iterator gives one tensor per output, so resize or crop them to one shape "
                "in the pipeline")
        return data.as_array()
    return np.asarray(data)


def feed_ndarray(data: Any, arr: Any, cuda_stream: Any = None) -> Any:
    """Copy ``data`` (a batch's ``TensorList`` with samples of one shape, or an array) into
    the torch tensor ``arr`` of the same dtype and shape, on any device; on ``cuda_stream``
    (a ``torch.cuda.Stream``), where given, without waiting. Returns ``arr``."""
    torch = _torch()
    source = torch.from_numpy(_writable(_array(data, "feed_ndarray")))
    if source.dtype != arr.dtype:
        raise InvalidArgument(f"feed_ndarray: the data is {source.dtype}, the tensor "
                              f"{arr.dtype}")
    if list(source.shape) != list(arr.shape):
        raise InvalidArgument(f"feed_ndarray: the data has shape {list(source.shape)}, the "
                              f"tensor {list(arr.shape)}")
    if cuda_stream is not None and arr.is_cuda:
        with torch.cuda.stream(cuda_stream):
            arr.copy_(source, non_blocking=True)
    else:
        arr.copy_(source)
    return arr


def _writable(array: np.ndarray) -> np.ndarray:
    """torch takes only writable arrays without a warning: a read-only one is copied."""
    return array if array.flags.writeable else array.copy()


class DALIGenericIterator(BaseIterator):
    """DALI's ``DALIGenericIterator``: ``output_map`` names the pipelines' outputs, in
    order; every other argument is ``base_iterator.BaseIterator``'s, with DALI's defaults.
    ``dynamic_shape`` is accepted and changes nothing (as in DALI)."""

    def __init__(self, pipelines: Any, output_map: list[str], size: int = -1,
                 reader_name: str | None = None, auto_reset: bool | str | None = False,
                 fill_last_batch: bool | None = None, dynamic_shape: bool | None = False,
                 last_batch_padded: bool = False,
                 last_batch_policy: LastBatchPolicy = LastBatchPolicy.FILL,
                 prepare_first_batch: bool = True) -> None:
        self._torch = _torch()
        names = list(output_map)
        if len(set(names)) != len(names):
            raise IteratorArgumentError(f"output_map {names}: the names must be distinct")
        self.output_map = names
        super().__init__(pipelines, size, reader_name, auto_reset, fill_last_batch,
                         last_batch_padded, last_batch_policy, prepare_first_batch)
        self._devices = [self._output_devices(i) for i in range(self._num_gpus)]
        for i, pipe in enumerate(self._pipes):
            if len(pipe.spec.outputs) != len(names):
                raise IteratorArgumentError(
                    f"output_map {names} names {len(names)} outputs, but pipeline {i} has "
                    f"{len(pipe.spec.outputs)}")
        self._prepare()

    def _output_devices(self, index: int) -> list[Any]:
        """Where each output of pipeline ``index`` goes: None for the CPU."""
        torch = self._torch
        pipe = self._pipes[index]
        gpu = torch.cuda.is_available() and pipe.device_id is not None
        return [torch.device("cuda", pipe.device_id) if gpu and on_gpu else None
                for on_gpu in pipe.output_on_gpu()]

    def __next__(self) -> list[dict[str, Any]]:
        batch: list[dict[str, Any]] = super().__next__()
        return batch

    def _convert(self, index: int, batch: Batch, kept: int | None) -> dict[str, Any]:
        torch = self._torch
        out: dict[str, Any] = {}
        for name, data, device in zip(self.output_map, batch, self._devices[index],
                                      strict=True):
            tensor = torch.from_numpy(_writable(_array(data, f"output {name!r}")))
            if device is not None:
                tensor = tensor.to(device)
            out[name] = tensor if kept is None else tensor[:kept]
        return out


class DALIClassificationIterator(DALIGenericIterator):
    """DALI's ``DALIClassificationIterator``: ``DALIGenericIterator`` with the outputs
    named ``["data", "label"]``."""

    def __init__(self, pipelines: Any, size: int = -1, reader_name: str | None = None,
                 auto_reset: bool | str | None = False, fill_last_batch: bool | None = None,
                 dynamic_shape: bool | None = False, last_batch_padded: bool = False,
                 last_batch_policy: LastBatchPolicy = LastBatchPolicy.FILL,
                 prepare_first_batch: bool = True) -> None:
        super().__init__(pipelines, ["data", "label"], size, reader_name=reader_name,
                         auto_reset=auto_reset, fill_last_batch=fill_last_batch,
                         dynamic_shape=dynamic_shape, last_batch_padded=last_batch_padded,
                         last_batch_policy=last_batch_policy,
                         prepare_first_batch=prepare_first_batch)


class DALIRaggedIterator(DALIGenericIterator):
    """DALI's ``DALIRaggedIterator``: ``DALIGenericIterator`` where ``output_types`` (one
    tag per output; None: all ``DENSE_TAG``) says how each output comes:

    - ``DENSE_TAG`` ("dense"): one tensor, the batch stacked (its samples of one shape);
    - ``SPARSE_LIST_TAG`` ("sparse_list"): a list of tensors, one per sample, each its own
      shape;
    - ``SPARSE_COO_TAG`` ("sparse_coo"): a ``torch.sparse_coo_tensor`` whose row ``i`` holds
      sample ``i``'s values at columns ``0 .. len - 1``: shape ``(batch, the longest
      sample)``, as DALI builds it for samples of one dimension (samples of more keep their
      other dimensions as dense ones).

    A partial last batch keeps its first samples, as a list's or a dense tensor's first
    entries, and a COO tensor of those samples alone."""

    DENSE_TAG = "dense"
    SPARSE_LIST_TAG = "sparse_list"
    SPARSE_COO_TAG = "sparse_coo"

    def __init__(self, pipelines: Any, output_map: list[str], size: int = -1,
                 reader_name: str | None = None, output_types: list[str] | None = None,
                 auto_reset: bool | str | None = False, fill_last_batch: bool | None = None,
                 dynamic_shape: bool | None = False, last_batch_padded: bool = False,
                 last_batch_policy: LastBatchPolicy = LastBatchPolicy.FILL,
                 prepare_first_batch: bool = True) -> None:
        tags = (self.DENSE_TAG, self.SPARSE_LIST_TAG, self.SPARSE_COO_TAG)
        types = [self.DENSE_TAG] * len(output_map) if output_types is None \
            else list(output_types)
        wrong = sorted(set(types) - set(tags))
        if wrong:
            raise IteratorArgumentError(f"output_types {types}: {wrong} are no tags; use "
                                        "DENSE_TAG, SPARSE_LIST_TAG or SPARSE_COO_TAG")
        if len(types) != len(output_map):
            raise IteratorArgumentError(f"output_types {types} has {len(types)} tags for the "
                                        f"{len(output_map)} outputs of output_map")
        self._output_types = types
        super().__init__(pipelines, output_map, size, reader_name=reader_name,
                         auto_reset=auto_reset, fill_last_batch=fill_last_batch,
                         dynamic_shape=dynamic_shape, last_batch_padded=last_batch_padded,
                         last_batch_policy=last_batch_policy,
                         prepare_first_batch=prepare_first_batch)

    def __next__(self) -> list[dict[str, Any]]:
        batch: list[dict[str, Any]] = super().__next__()
        return batch

    def _convert(self, index: int, batch: Batch, kept: int | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, data, tag, device in zip(self.output_map, batch, self._output_types,
                                           self._devices[index], strict=True):
            if tag == self.DENSE_TAG:
                tensor = self._tensor(_array(data, f"output {name!r}"), device)
                out[name] = tensor if kept is None else tensor[:kept]
                continue
            samples = [self._tensor(sample, device) for sample in data]
            samples = samples if kept is None else samples[:kept]
            out[name] = samples if tag == self.SPARSE_LIST_TAG else self._coo(samples)
        return out

    def _tensor(self, array: np.ndarray, device: Any) -> Any:
        tensor = self._torch.from_numpy(_writable(np.ascontiguousarray(array)))
        return tensor if device is None else tensor.to(device)

    def _coo(self, samples: list[Any]) -> Any:
        """DALI's COO form: sample ``i``'s ``j``-th value at ``(i, j)``."""
        torch = self._torch
        rows = [torch.full((len(s),), i, dtype=torch.int64) for i, s in enumerate(samples)]
        cols = [torch.arange(len(s), dtype=torch.int64) for s in samples]
        if not samples:
            return torch.sparse_coo_tensor(torch.zeros((2, 0), dtype=torch.int64),
                                           torch.zeros(0), check_invariants=True)
        indices = torch.stack([torch.cat(rows), torch.cat(cols)]).to(samples[0].device)
        return torch.sparse_coo_tensor(indices, torch.cat(samples), check_invariants=True)
