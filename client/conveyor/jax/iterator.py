"""``ConveyorIterator``: a Conveyor pipeline as an iterator of ``jax.Array`` batches.

It takes what a ``@pipeline_def`` function returns (run in this process) or a
``RemotePipeline`` (``client.open(name, spec)``). Each step is a dict, output name ->
``jax.Array`` (the batch stacked: an output's samples need one shape), or a tuple where no
``output_map`` is given. ``sharding`` places each array: a ``jax.sharding.Sharding`` (such
as ``batch_sharding()``, the batch axis split over the process's devices) or a device;
without it, JAX's default device.

Its state is the trainer's position, as ``conveyor.torch``'s: ``get_state()`` is a
JSON-able dict (Grain's and Orbax's convention), saved with the model; ``set_state(state)``
on an iterator over the same pipeline definition goes on right after the batches the state
counts. In process the state holds the pipeline's checkpoint (the pipeline needs
``enable_checkpointing=True``); for a remote pipeline it holds the count of batches taken,
and the pipeline is reopened there (``client.open(..., consumed=...)``), on any server.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from conveyor.definition.pipeline import Pipeline
from conveyor.errors import CheckpointingDisabled, InvalidArgument
from conveyor.tensor_list import TensorList

try:
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError("conveyor.jax needs JAX: pip install jax") from exc

#: The version of ``get_state()``'s layout.
STATE_VERSION = 1
#: The mesh axis ``batch_sharding`` splits a batch over.
BATCH_AXIS = "batch"


def batch_sharding(devices: Sequence[Any] | None = None) -> NamedSharding:
    """The sharding that splits the first (batch) axis of every output over ``devices``
    (default: this process's, ``jax.local_devices()``); the other axes are not split."""
    chosen = list(devices) if devices is not None else jax.local_devices()
    mesh = Mesh(np.array(chosen), (BATCH_AXIS,))
    return NamedSharding(mesh, PartitionSpec(BATCH_AXIS))


def as_array(out: TensorList, name: str) -> np.ndarray:
    """One output's samples stacked; ``InvalidArgument`` where they differ in shape."""
    if not out.is_dense_tensor():
        raise InvalidArgument(
            f"output {name!r}: its samples differ in shape ({sorted(set(out.shape()))}); a "
            "jax.Array holds one shape, so resize or crop them to one in the pipeline")
    return out.as_array()


def put(array: np.ndarray, where: Any, name: str) -> jax.Array:
    """``array`` on ``where`` (a sharding, a device, or None: JAX's default device)."""
    if isinstance(where, NamedSharding):
        parts = where.mesh.shape.get(BATCH_AXIS)
        if parts and array.shape and array.shape[0] % parts:
            raise InvalidArgument(
                f"output {name!r}: a batch of {array.shape[0]} samples does not split over "
                f"the sharding's {parts} devices; make the pipeline's batch_size a multiple "
                f"of {parts}")
    return jax.device_put(array, where)


class ConveyorIterator:
    """Batches of a pipeline as ``jax.Array``s; see the module's docstring."""

    def __init__(self, pipeline: Any, output_map: Sequence[str] | None = None, *,
                 sharding: Any = None) -> None:
        if not isinstance(pipeline, Pipeline) and not all(
                hasattr(pipeline, a) for a in ("run_on", "consumed", "info", "client")):
            raise InvalidArgument(
                "ConveyorIterator takes a pipeline made by a @pipeline_def function or a "
                f"RemotePipeline (client.open), not {type(pipeline).__name__}")
        self._pipe = pipeline
        self._local = isinstance(pipeline, Pipeline)
        spec = pipeline.spec if self._local else pipeline.info.spec
        names = list(output_map) if output_map is not None else None
        if names is not None and (len(set(names)) != len(names)
                                  or len(names) != len(spec.outputs)):
            raise InvalidArgument(
                f"output_map {names}: it needs {len(spec.outputs)} distinct names, one per "
                "output of the pipeline")
        self.output_map = names
        self.sharding = sharding
        #: Batches handed out since the pipeline's start (a restored one's included).
        self.batches = 0 if self._local else int(pipeline.consumed)

    @property
    def pipeline(self) -> Any:
        """The pipeline batches come from (a new one after ``set_state``)."""
        return self._pipe

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        batch = self._pipe.run() if self._local else self._pipe.run_on()
        self.batches += 1
        names = self.output_map or [f"output {i}" for i in range(len(batch))]
        arrays = [put(as_array(out, name), self.sharding, name)
                  for out, name in zip(batch, names, strict=True)]
        if self.output_map is None:
            return tuple(arrays)
        return dict(zip(self.output_map, arrays, strict=True))

    # -- state -------------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        """The position after the batches handed out so far, as a JSON-able dict."""
        state: dict[str, Any] = {"version": STATE_VERSION, "batches": self.batches}
        if self._local:
            if not self._pipe.enable_checkpointing:
                raise CheckpointingDisabled(
                    "ConveyorIterator.get_state: the pipeline has checkpointing disabled; "
                    "build it with enable_checkpointing=True")
            blob = self._pipe.checkpoint()
            state["checkpoint"] = base64.b64encode(blob).decode("ascii")
        else:
            state["pipeline"] = self._pipe.name
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Go on right after the batches ``state`` (``get_state()``'s) counts."""
        version = state.get("version")
        if version != STATE_VERSION:
            raise InvalidArgument(f"ConveyorIterator state version {version!r}: this client "
                                  f"reads version {STATE_VERSION}")
        batches = state.get("batches")
        if isinstance(batches, bool) or not isinstance(batches, int) or batches < 0:
            raise InvalidArgument(f"ConveyorIterator state: batches={batches!r} is not a "
                                  "count of batches")
        pipe = self._pipe
        if self._local:
            blob = state.get("checkpoint")
            if not isinstance(blob, str):
                raise InvalidArgument("ConveyorIterator state: it holds no checkpoint of an "
                                      "in-process pipeline (was it saved from a remote one?)")
            restored = type(pipe)(pipe.spec, checkpoint=base64.b64decode(blob),
                                  options=pipe.options)
            pipe.close()
            self._pipe = restored
        else:
            if state.get("pipeline") != pipe.name:
                raise InvalidArgument(f"ConveyorIterator state is of pipeline "
                                      f"{state.get('pipeline')!r}, not of {pipe.name!r}")
            pipe.close()
            self._pipe = pipe.client.open(pipe.name, pipe.info.spec,
                                          run_id=pipe.info.run_id or None, consumed=batches)
        self.batches = batches

    def close(self) -> None:
        self._pipe.close()
