"""The pipeline a ``@pipeline_def`` function returns, with DALI's ``Pipeline`` methods.

``pipe = my_pipeline(batch_size=8); pipe.build(); outs = pipe.run()`` runs the pipeline in
this process on the engine (``conveyor_server.Pipeline``, loaded on ``build()``: the
``conveyor-server`` package). ``pipe.checkpoint()`` gives the sealed checkpoint of the
position after the last batch returned, and ``my_pipeline(checkpoint=blob)`` goes on from it.

**Epochs of external sources**, as DALI's: where an ``external_source``'s callable raises
StopIteration, ``run()`` (``outputs()``, ``share_outputs()``) raises StopIteration, and
keeps raising it until ``reset()``; the next ``run()`` gives the next epoch's first batch.
A batch cut short by StopIteration is dropped (there is no partial last batch). The engine
says which batch opens such an epoch (``epoch_started``, a function of the position); this
object holds that batch back until ``reset()``. A checkpoint taken after StopIteration was
raised (before or after ``reset()``) resumes at the next epoch's start, without raising it
again; one taken after an epoch's last batch, before the StopIteration, raises it first.
A pipeline streamed from a server (``RemotePipeline``) behaves the same: the server marks
the batch that opens an epoch in its header.
The same object is taken wherever a spec is (``.spec`` is its ``PipelineSpec``): by
``client.open``, the adapters and ``conveyor_server.Pipeline``.

This module imports no gRPC and no engine until ``build()``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from conveyor.errors import FailedPrecondition, InvalidArgument
from conveyor.tensor_list import TensorList
from conveyor.v1 import pipeline_pb2

Batch = tuple[TensorList, ...]


@dataclass(frozen=True)
class RunOptions:
    """DALI's pipeline arguments that are not part of the spec, and what each does here.

    ``exec_async``, ``exec_pipelined``, ``exec_dynamic``: accepted, no effect. The engine
    always computes ``prefetch_queue_depth`` batches ahead on its worker threads; the
    batches are the same either way. (``py_num_workers`` and ``py_start_method`` are part
    of the spec: the worker processes of parallel external sources.) ``set_affinity``:
    accepted, no effect (worker threads are not pinned to cores). ``output_dtype``,
    ``output_ndim``: checked, as DALI's: one value for every output or one per output
    (``None`` skips an output); a batch whose output has another dtype or number of
    dimensions raises ``InvalidArgument`` naming the output.
    """

    exec_async: bool = True
    exec_pipelined: bool = True
    set_affinity: bool = False
    exec_dynamic: bool = False
    output_dtype: Any = None
    output_ndim: Any = None


class Engine(Protocol):
    """What this module uses of ``conveyor_server.Pipeline``."""

    spec: pipeline_pb2.PipelineSpec

    def run(self) -> Batch: ...
    def run_staged(self) -> tuple[Batch, Callable[[], None]]: ...
    def checkpoint(self, filename: str | None = None, *, batches: int | None = None,
                   past_epoch_end: bool = False) -> bytes: ...
    @property
    def batches_returned(self) -> int: ...
    @property
    def epoch_started(self) -> bool: ...
    def epoch_sizes(self) -> dict[str, int]: ...
    def epoch_size(self, name: str | None = None) -> Any: ...
    def reader_metas(self) -> dict[str, Any]: ...
    def reader_meta(self, name: str | None = None) -> Any: ...
    def close(self) -> None: ...


def load_engine(spec: pipeline_pb2.PipelineSpec, checkpoint: bytes | None) -> Engine:
    """The in-process engine for ``spec`` (from ``checkpoint`` when given); a clear error
    where the server package is not installed."""
    try:
        module = importlib.import_module("conveyor_server")
    except ModuleNotFoundError as exc:
        if exc.name != "conveyor_server":
            raise
        raise FailedPrecondition(
            "running a pipeline in this process needs the engine, the conveyor-server "
            "distribution (from a Conveyor clone: pip install ./server), or stream it from a "
            "server with conveyor.Client(...).open"
        ) from None
    engine: Engine = module.Pipeline(spec, checkpoint=checkpoint)
    return engine


class Pipeline:
    """A defined pipeline, as DALI's ``Pipeline``: ``build()``, ``run()``, ``checkpoint()``,
    ``epoch_size()``, ``reader_meta()``, ``schedule_run()`` / ``outputs()`` /
    ``share_outputs()`` / ``release_outputs()``, ``reset()``. Made by calling a
    ``@pipeline_def`` function; runs in this process once built."""

    __slots__ = ("_checkpoint", "_engine", "_held", "_release", "_scheduled", "_spec",
                 "_stopped", "options")

    def __init__(self, spec: pipeline_pb2.PipelineSpec, *, checkpoint: bytes | None = None,
                 options: RunOptions | None = None) -> None:
        self._spec = spec
        self._checkpoint = checkpoint
        self.options = options or RunOptions()
        self._engine: Engine | None = None
        self._scheduled = 0
        self._release: Callable[[], None] | None = None
        #: The batch that opens an external source's next epoch, held back from the
        #: StopIteration raised before it until ``reset()`` (with its release, if staged).
        self._held: tuple[Batch, Callable[[], None] | None] | None = None
        self._stopped = False

    @property
    def spec(self) -> pipeline_pb2.PipelineSpec:
        """The ``PipelineSpec``. Once a restored pipeline is built, the one running: where
        no seed was given, with the checkpoint's seed."""
        return self._engine.spec if self._engine is not None else self._spec

    @property
    def batch_size(self) -> int:
        return self.spec.batch_size

    @property
    def max_batch_size(self) -> int:
        """DALI's name for ``batch_size``."""
        return self.spec.batch_size

    @property
    def num_threads(self) -> int:
        return self.spec.num_threads

    @property
    def device_id(self) -> int | None:
        return self.spec.device_id if self.spec.device_id >= 0 else None

    @property
    def seed(self) -> int:
        return self.spec.seed

    @property
    def prefetch_queue_depth(self) -> int:
        return self.spec.prefetch_queue_depth

    @property
    def enable_checkpointing(self) -> bool:
        return self.spec.enable_checkpointing

    @property
    def exec_async(self) -> bool:
        return self.options.exec_async

    @property
    def exec_pipelined(self) -> bool:
        return self.options.exec_pipelined

    # -- building --------------------------------------------------------------------

    def build(self) -> None:
        """Start the engine (from the checkpoint, where one was given). Building again does
        nothing; the other methods build first where needed, as DALI's."""
        if self._engine is None:
            self._engine = load_engine(self._spec, self._checkpoint)

    def _built(self) -> Engine:
        self.build()
        assert self._engine is not None
        return self._engine

    # -- running ---------------------------------------------------------------------

    def run(self) -> Batch:
        """The next batch, one ``TensorList`` per output: ``schedule_run()`` then
        ``outputs()``."""
        self.schedule_run()
        return self.outputs()

    def schedule_run(self) -> None:
        """Ask for one more batch (the engine computes ``prefetch_queue_depth`` ahead
        anyway); ``outputs()`` or ``share_outputs()`` takes it."""
        self._built()
        self._scheduled += 1

    def outputs(self) -> Batch:
        """The batch the earliest ``schedule_run()`` asked for, the caller's to keep."""
        engine = self._take_scheduled("outputs")
        batch, release = self._next(engine, staged=False)
        if release is not None:  # held from share_outputs(): its buffers until released
            self.release_outputs()
            self._release = release
        return self._checked(batch)

    def share_outputs(self) -> Batch:
        """As ``outputs()``, but a GPU pipeline's outputs are the engine's own buffers,
        valid until ``release_outputs()``."""
        if self._release is not None:
            raise FailedPrecondition("share_outputs: the previous shared batch is still "
                                     "held: call release_outputs() first")
        engine = self._take_scheduled("share_outputs")
        batch, release = self._next(engine, staged=True)
        self._release = release
        try:
            return self._checked(batch)
        except BaseException:
            self.release_outputs()
            raise

    def _next(self, engine: Engine, *, staged: bool
              ) -> tuple[Batch, Callable[[], None] | None]:
        """The next batch, or StopIteration where an external source's epoch ended (until
        ``reset()``)."""
        if self._stopped:
            raise StopIteration
        if self._held is not None:
            held, self._held = self._held, None
            return held
        taken: tuple[Batch, Callable[[], None] | None] = (
            engine.run_staged() if staged else (engine.run(), None))
        if engine.epoch_started:
            self._held, self._stopped = taken, True
            raise StopIteration
        return taken

    def release_outputs(self) -> None:
        """Give back the buffers of the batch ``share_outputs()`` returned."""
        release, self._release = self._release, None
        if release is not None:
            release()

    def _take_scheduled(self, method: str) -> Engine:
        if self._scheduled == 0:
            raise FailedPrecondition(f"{method}: no batch was scheduled: call schedule_run() "
                                     "first (or run(), which does both)")
        engine = self._built()
        self._scheduled -= 1
        return engine

    def _checked(self, batch: Batch) -> Batch:
        """``batch``, where its outputs have the ``output_dtype`` and ``output_ndim``."""
        dtypes = _per_output(self.options.output_dtype, len(batch), "output_dtype")
        ndims = _per_output(self.options.output_ndim, len(batch), "output_ndim")
        for index, (out, dtype, ndim) in enumerate(zip(batch, dtypes, ndims, strict=True)):
            if dtype is not None and np.dtype(out.dtype) != _dtype(dtype):
                raise InvalidArgument(f"output {index} has dtype {np.dtype(out.dtype).name}, "
                                      f"but output_dtype asks for {_dtype(dtype).name}")
            if ndim is not None:
                found = {len(shape) for shape in out.shape()}
                if found - {ndim}:
                    raise InvalidArgument(f"output {index} has {sorted(found)} dimensions, "
                                          f"but output_ndim asks for {ndim}")
        return batch

    def reset(self) -> None:
        """After StopIteration (an external source's epoch ended): start the next epoch.
        Otherwise nothing, as DALI's (readers do not stop at an epoch's end)."""
        self._stopped = False

    # -- state -----------------------------------------------------------------------

    def checkpoint(self, filename: str | None = None, *, batches: int | None = None) -> bytes:
        """The sealed checkpoint of the position after the last batch returned (scheduled
        batches not yet taken are not in it), or after the first ``batches`` (at most those
        returned: an iterator holding a batch it has not handed out checkpoints before it);
        written to ``filename`` too, where given. Needs ``enable_checkpointing=True``."""
        engine = self._built()
        returned = self.batches_returned
        if self._held is None:
            return engine.checkpoint(filename, batches=batches)
        at = returned if batches is None else batches
        return engine.checkpoint(filename, batches=at, past_epoch_end=at == returned)

    @property
    def batches_returned(self) -> int:
        """Batches returned since the pipeline's start (a restored pipeline counts from its
        checkpoint's position); builds the pipeline."""
        held = 1 if self._held is not None else 0
        return self._built().batches_returned - held

    def epoch_size(self, name: str | None = None) -> Any:
        """Samples per epoch of the reader ``name``; of every reader, by name, without one
        (``op<index>`` for an unnamed reader)."""
        engine = self._built()
        return engine.epoch_sizes() if name is None else engine.epoch_size(name)

    def reader_meta(self, name: str | None = None) -> Any:
        """The metadata of the reader ``name`` (``epoch_size``, ``epoch_size_padded``,
        ``number_of_shards``, ``shard_id``, ...); of every reader, by name, without one."""
        engine = self._built()
        return engine.reader_metas() if name is None else engine.reader_meta(name)

    # -- lifetime --------------------------------------------------------------------

    def close(self) -> None:
        """Stop the engine's workers (a later call builds a new engine from the start)."""
        self.release_outputs()
        held, self._held, self._stopped = self._held, None, False
        if held is not None and held[1] is not None:
            held[1]()
        engine, self._engine = self._engine, None
        self._scheduled = 0
        if engine is not None:
            engine.close()

    def __repr__(self) -> str:
        state = "built" if self._engine is not None else "not built"
        return (f"<conveyor Pipeline {self._spec.definition or '?'} batch_size="
                f"{self._spec.batch_size} seed={self.seed} {state}>")


def _per_output(value: Any, count: int, name: str) -> Sequence[Any]:
    """``value`` for each of ``count`` outputs: one value for all, or a list of ``count``."""
    if isinstance(value, list | tuple):
        if len(value) != count:
            raise InvalidArgument(f"{name} has {len(value)} entries, but the pipeline has "
                                  f"{count} outputs")
        return value
    return [value] * count


def _dtype(value: Any) -> np.dtype[Any]:
    """A dtype given as ``types.FLOAT`` (a ``str``: ``"float32"``) or as numpy's."""
    return np.dtype(str(value)) if isinstance(value, str) else np.dtype(value)
