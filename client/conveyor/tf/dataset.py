"""``ConveyorDataset``: a pipeline of a Conveyor server as a ``tf.data.Dataset``.

Each element is one batch: a tuple with one tensor per pipeline output, in the stream's
dtype (``tensors.py``: dense, or ragged where samples differ in shape).

How its position is checkpointed. The dataset is ``range(start, ...)`` mapped through a
``tf.py_function`` that takes the batch at that index from the stream (``stream.py``).
tf.data checkpoints the range's position, the index of the next batch: that is the
trainer's position, a count of batches, and nothing else is saved (no image bytes). Two
options of the dataset make it so:

- symbolic checkpointing (``experimental_symbolic_checkpoint``): a ``prefetch`` (or any
  transformation that computes ahead) after this dataset saves the position of what the
  trainer took, not of what was computed ahead, and drops its buffer; after a restore the
  buffered batches are asked for again, by index, and the server computes the same bytes;
- the function's state outside TensorFlow (the gRPC stream) is left out of checkpoints
  (``ExternalStatePolicy.IGNORE``): the index alone says where the stream goes on.

So ``tf.train.Checkpoint(iterator=iterator)`` of any iterator over this dataset (or over
``dataset.prefetch(...)``, ``.map(...)``, ``.take(...)``) saves where the trainer stands,
and restoring it into an iterator of a fresh ``ConveyorDataset`` (another process, another
server) goes on with the very same bytes, as DALI's TensorFlow plugin does with its own
checkpoints. The dataset itself is checkpointable too (``tf.train.Checkpoint(dataset=...)``):
it saves the position of its newest iterator (the one ``for batch in dataset`` makes, kept
after its loop ended), and a restored dataset's next iterator starts there. Batches taken
only through a dataset made from it (``dataset.prefetch(2)``) make that checkpoint refuse
(FailedPrecondition), and so does taking a batch that way from a restored dataset before
iterating it: the dataset's own checkpoint is not that iterator's position; checkpoint that
dataset's iterator instead.

Like every ``tf.data.Dataset``, each new iterator starts at the dataset's start: the
position ``Client.open`` found when the dataset was made (batch 0 for a new pipeline, the
run's position for a resumed one). The stream never ends: bound an epoch with ``take`` or
``steps_per_epoch``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf
from tensorflow.python.data.ops import dataset_ops

from conveyor.definition.spec import Definition, as_spec
from conveyor.errors import FailedPrecondition, InvalidArgument
from conveyor.tf.stream import BatchStream, parallel_arguments
from conveyor.tf.tensors import signature_of, value_of

#: The last index the dataset's range counts to: far beyond any stream.
END = 2**62


class ConveyorDataset(dataset_ops.DatasetV2):
    def __init__(self, servers: str | Sequence[str], name: str,
                 spec: Definition, *, run_id: str | None = None,
                 rank: int | None = None, world_size: int | None = None,
                 output_signature: Sequence[Any] | None = None,
                 client_options: dict[str, Any] | None = None) -> None:
        """Open pipeline ``name`` (``Client.open``: created the first time, resumed by the
        same run afterwards) and take its first batch to learn the outputs' specs.

        ``servers``: as ``conveyor.Client`` takes them. ``run_id``: this training run.
        ``rank``, ``world_size``: this trainer's share of a data-parallel job, passed to
        ``Client.open`` when given. ``output_signature``: one ``tf.TensorSpec`` or
        ``tf.RaggedTensorSpec`` per output, instead of those of the first batch.
        ``client_options``: more keyword arguments for ``conveyor.Client``."""
        self.name = name
        self._stream = BatchStream(servers, name, as_spec(spec), run_id=run_id,
                                   parallel=parallel_arguments(rank, world_size),
                                   client_options=dict(client_options or {}))
        try:
            if output_signature is None:
                signature = signature_of(self._stream.first())
            else:
                signature = tuple(output_signature)
                self._check(signature)
        except BaseException:
            self._stream.close()
            raise
        self._signature = signature
        options = tf.data.Options()
        options.experimental_symbolic_checkpoint = True
        options.experimental_external_state_policy = \
            tf.data.experimental.ExternalStatePolicy.IGNORE
        self._batches = tf.data.Dataset.range(self._stream.start, END) \
            .map(self._take).with_options(options)
        #: The newest iterator of this dataset itself, kept: once a loop over it ended (a
        #: ``break``), its position is still the one a checkpoint of the dataset saves.
        self._newest: Any = None
        #: That iterator's position, kept in its place once the dataset is closed.
        self._closed_at: Any = None
        self._restored: Any = None
        #: Whether any iterator took a batch since the dataset was made or restored.
        self._taken = False
        super().__init__(self._batches._variant_tensor)

    @property
    def start(self) -> int:
        """The stream's position when the dataset was made: where a fresh iterator starts."""
        return self._stream.start

    def _check(self, signature: tuple[Any, ...]) -> None:
        for i, spec in enumerate(signature):
            if not isinstance(spec, tf.TensorSpec | tf.RaggedTensorSpec):
                raise InvalidArgument(f"output_signature[{i}] is {spec!r}: a tf.TensorSpec "
                                      "or tf.RaggedTensorSpec is needed")

    def _take(self, index: Any) -> tuple[Any, ...]:
        values = tf.py_function(self._batch, [index], list(self._signature))
        return tuple(tf.ensure_shape(value, spec.shape)
                     if isinstance(spec, tf.TensorSpec) else value
                     for value, spec in zip(values, self._signature, strict=True))

    def _batch(self, index: Any) -> list[Any]:
        position = int(index)
        if self._restored is not None:
            raise FailedPrecondition(
                f"ConveyorDataset {self.name!r} was restored from a checkpoint, whose position "
                "only an iterator of the dataset itself (iter(dataset), for ... in dataset) "
                f"starts at; an iterator of a dataset made from it asked for batch {position} "
                "from the dataset's start: iterate the dataset itself, or checkpoint and "
                "restore the iterator you use (tf.train.Checkpoint(iterator=iterator))")
        self._taken = True
        batch = self._stream.batch(position)
        if len(batch) != len(self._signature):
            raise InvalidArgument(f"batch {position} of {self.name!r} has {len(batch)} "
                                  f"outputs, the signature {len(self._signature)}")
        return [value_of(out, spec, f"output {i} of batch {position} of {self.name!r}")
                for i, (out, spec) in enumerate(zip(batch, self._signature, strict=True))]

    # -- a tf.data.Dataset -----------------------------------------------------------

    def _inputs(self) -> list[Any]:
        return []

    @property
    def element_spec(self) -> Any:
        return self._batches.element_spec

    def __iter__(self) -> Any:
        iterator = super().__iter__()
        if self._restored is not None:
            iterator._restore_from_tensors({"_STATE": self._restored})
            self._restored = None
        self._newest = iterator
        return iterator

    # -- checkpointing the dataset: its newest iterator's position -------------------

    def _serialize_to_tensors(self) -> dict[str, Any]:
        newest = self._newest
        if newest is None and self._closed_at is not None:
            return {"_STATE": self._closed_at}
        if newest is None:
            if self._taken:
                raise FailedPrecondition(
                    f"ConveyorDataset {self.name!r}: its batches were taken by an iterator "
                    "of a dataset made from it (prefetch, map, take...), whose position a "
                    "checkpoint of this dataset does not know: checkpoint that iterator "
                    "(tf.train.Checkpoint(iterator=iterator))")
            if self._restored is not None:
                return {"_STATE": self._restored}
            newest = super().__iter__()  # (makes no batch: at the start)
        return {"_STATE": newest._serialize_to_tensors()["_STATE"]}

    def _restore_from_tensors(self, restored_tensors: dict[str, Any]) -> list[Any]:
        self._restored = restored_tensors["_STATE"]
        self._newest = None
        self._closed_at = None
        self._taken = False
        return []

    def close(self) -> None:
        """End the stream (the pipeline stays on its server, resumable). An iterator that
        asks for a batch afterwards (tf.data computing ahead for a loop that ended) is
        refused (FailedPrecondition): it never opens the pipeline again, which would take
        over the stream of the next dataset opened on it.

        The newest iterator is let go, its position kept (a checkpoint of the closed dataset
        still saves it). An iterator refers to its dataset, so one the dataset held would
        be freed only by a garbage collection, perhaps the last one, as the interpreter
        exits, where TensorFlow's teardown of an iterator can wait up to a minute for the
        iterator's autotuning thread."""
        try:
            newest, self._newest = self._newest, None
            if newest is not None:
                self._closed_at = newest._serialize_to_tensors()["_STATE"]
        finally:
            self._stream.close()
