"""DALI's ``nvidia.dali.plugin.jax``: ``DALIGenericIterator``, ``data_iterator`` and
``peekable_data_iterator`` over Conveyor pipelines, in this process or on a server.

Each step is one dict, output name -> ``jax.Array`` (an output's samples stacked: they need
one shape). With one pipeline, its batch; with several (one per device, as
``data_iterator`` makes them with ``sharding``), their batches side by side: one array
split over ``sharding`` where it is given, else stacked on a new first axis (for
``jax.pmap``), as DALI's. Epochs, resets, ``len()``, ``size`` and ``checkpoints()`` are
``base_iterator``'s; ``LastBatchPolicy.PARTIAL`` is refused, as DALI's JAX iterator does.
JAX is imported when this module is.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from conveyor.dali.pipeline import pipeline_def
from conveyor.dali.plugin.base_iterator import BaseIterator, IteratorArgumentError
from conveyor.dali.plugin.epochs import LastBatchPolicy
from conveyor.dali.plugin.pipelines import Batch
from conveyor.jax.iterator import as_array

try:
    import jax
    import jax.numpy as jnp
    from jax.sharding import Sharding
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError("conveyor.dali.plugin.jax needs JAX: pip install jax") \
        from exc

__all__ = ["DALIGenericIterator", "LastBatchPolicy", "data_iterator",
           "peekable_data_iterator"]


class DALIGenericIterator(BaseIterator):
    """DALI's JAX ``DALIGenericIterator``: ``output_map`` names the outputs; ``sharding``
    (a ``jax.sharding.Sharding``) places the pipelines' batches as one array."""

    def __init__(self, pipelines: Any, output_map: list[str], size: int = -1,
                 reader_name: str | None = None, auto_reset: bool | str | None = False,
                 last_batch_padded: bool = False,
                 last_batch_policy: LastBatchPolicy = LastBatchPolicy.FILL,
                 prepare_first_batch: bool = True, sharding: Sharding | None = None) -> None:
        names = list(output_map)
        if len(set(names)) != len(names):
            raise IteratorArgumentError(f"output_map {names}: the names must be distinct")
        if last_batch_policy is LastBatchPolicy.PARTIAL:
            raise IteratorArgumentError("the JAX iterator does not take LastBatchPolicy."
                                        "PARTIAL (a jax.Array's shape is fixed): use FILL "
                                        "or DROP")
        if sharding is not None and not isinstance(sharding, Sharding):
            raise IteratorArgumentError(f"sharding={sharding!r}: expected a "
                                        "jax.sharding.Sharding")
        self.output_map = names
        self._sharding = sharding
        super().__init__(pipelines, size, reader_name, auto_reset, None, last_batch_padded,
                         last_batch_policy, prepare_first_batch)
        for i, pipe in enumerate(self._pipes):
            if len(pipe.spec.outputs) != len(names):
                raise IteratorArgumentError(
                    f"output_map {names} names {len(names)} outputs, but pipeline {i} has "
                    f"{len(pipe.spec.outputs)}")
        self._prepare()

    def __next__(self) -> dict[str, Any]:  # type: ignore[override]
        per_pipeline: list[dict[str, Any]] = super().__next__()
        if len(per_pipeline) == 1:
            only: dict[str, Any] = per_pipeline[0]
            return only
        out: dict[str, Any] = {}
        for name in self.output_map:
            parts = [batch[name] for batch in per_pipeline]
            shapes = {part.shape for part in parts}
            if len(shapes) != 1:
                raise IteratorArgumentError(f"output {name!r}: the pipelines' batches have "
                                            f"the shapes {sorted(shapes)}; they need one")
            if self._sharding is None:
                out[name] = jnp.stack(parts)
            else:
                out[name] = jax.device_put(jnp.concatenate(parts), self._sharding)
        return out

    def next(self) -> dict[str, Any]:  # type: ignore[override]
        return self.__next__()

    def _convert(self, index: int, batch: Batch, kept: int | None) -> dict[str, Any]:
        return {name: jnp.asarray(as_array(data, name))
                for name, data in zip(self.output_map, batch, strict=True)}


class DALIGenericPeekableIterator(DALIGenericIterator):
    """``DALIGenericIterator`` whose next batch can be seen before it is taken
    (``peek()``), and whose ``spec`` gives each output's shape and dtype."""

    _peeked: dict[str, Any] | None = None

    def peek(self) -> dict[str, Any]:
        """The next batch, which the next ``__next__`` returns too."""
        if self._peeked is None:
            self._peeked = super().__next__()
        return self._peeked

    def __next__(self) -> dict[str, Any]:  # type: ignore[override]
        peeked, self._peeked = self._peeked, None
        return peeked if peeked is not None else super().__next__()

    @property
    def spec(self) -> dict[str, jax.ShapeDtypeStruct]:
        """Each output's shape and dtype, from the next batch."""
        return {name: jax.ShapeDtypeStruct(a.shape, a.dtype) for name, a in self.peek().items()}


def _iterator_decorator(iterator_type: type[DALIGenericIterator],
                        pipeline_fn: Callable[..., Any] | None, output_map: list[str],
                        iterator_args: dict[str, Any],
                        decorator_kwargs: dict[str, Any]) -> Any:
    sharding = iterator_args["sharding"]

    def decorate(graph_fn: Callable[..., Any]) -> Callable[..., DALIGenericIterator]:
        make = pipeline_def(graph_fn)

        @functools.wraps(graph_fn)
        def create_iterator(*args: Any, **kwargs: Any) -> DALIGenericIterator:
            twice = sorted(set(kwargs) & set(decorator_kwargs))
            if twice:
                raise IteratorArgumentError(f"{twice[0]!r} is given to both the decorator and "
                                            "the call: give it once")
            merged = {**decorator_kwargs, **kwargs}
            if sharding is None:
                pipelines = [make(*args, **merged)]
            else:  # one pipeline per device, each its shard of the global batch
                devices = jax.local_devices()
                shards = len(jax.devices())
                merged["batch_size"] = merged["batch_size"] // shards
                pipelines = [make(*args, **merged, shard_id=device.id, num_shards=shards,
                                  **({"device_id": i} if device.platform == "gpu" else {}))
                             for i, device in enumerate(devices)]
            return iterator_type(pipelines, output_map, **iterator_args)

        return create_iterator

    return decorate(pipeline_fn) if pipeline_fn is not None else decorate


def data_iterator(pipeline_fn: Callable[..., Any] | None = None,
                  output_map: list[str] | None = None, size: int = -1,
                  reader_name: str | None = None, auto_reset: bool | str | None = False,
                  last_batch_padded: bool = False,
                  last_batch_policy: LastBatchPolicy = LastBatchPolicy.FILL,
                  prepare_first_batch: bool = True, sharding: Sharding | None = None,
                  **decorator_kwargs: Any) -> Any:
    """DALI's decorator: the decorated graph function, called, returns a
    ``DALIGenericIterator`` over its pipeline (``pipeline_def``'s arguments given to the
    decorator or the call, not both). With ``sharding``, one pipeline per local device,
    each given ``shard_id`` and ``num_shards`` (the function takes them) and its share of
    ``batch_size``."""
    return _iterator_decorator(DALIGenericIterator, pipeline_fn, list(output_map or []),
                               {"size": size, "reader_name": reader_name,
                                "auto_reset": auto_reset,
                                "last_batch_padded": last_batch_padded,
                                "last_batch_policy": last_batch_policy,
                                "prepare_first_batch": prepare_first_batch,
                                "sharding": sharding}, decorator_kwargs)


def peekable_data_iterator(pipeline_fn: Callable[..., Any] | None = None,
                           output_map: list[str] | None = None, size: int = -1,
                           reader_name: str | None = None,
                           auto_reset: bool | str | None = False,
                           last_batch_padded: bool = False,
                           last_batch_policy: LastBatchPolicy = LastBatchPolicy.FILL,
                           prepare_first_batch: bool = True,
                           sharding: Sharding | None = None,
                           **decorator_kwargs: Any) -> Any:
    """``data_iterator`` making ``DALIGenericPeekableIterator``s (``peek()``, ``spec``)."""
    return _iterator_decorator(DALIGenericPeekableIterator, pipeline_fn,
                               list(output_map or []),
                               {"size": size, "reader_name": reader_name,
                                "auto_reset": auto_reset,
                                "last_batch_padded": last_batch_padded,
                                "last_batch_policy": last_batch_policy,
                                "prepare_first_batch": prepare_first_batch,
                                "sharding": sharding}, decorator_kwargs)
