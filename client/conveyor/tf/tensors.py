"""A batch's outputs as TensorFlow values, and the type specs that describe them.

An output whose samples share one shape is a dense ``tf.Tensor`` of shape
``[batch, *sample_shape]``; one whose samples differ in shape (rotated images) is a
``tf.RaggedTensor`` whose leading sample dimensions are ragged and whose trailing ones, equal
in every sample (an image's channels), stay uniform. The dtype is the stream's: uint8 stays
uint8, float16 stays float16.

The specs are read from one batch of the stream (``signature_of``); a later batch that does
not fit them is refused with an error naming the output, so a pipeline whose sample shapes
vary only sometimes is given its signature by the trainer (``output_signature``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from conveyor.errors import InvalidArgument
from conveyor.tensor_list import TensorList

#: The index type of the ragged outputs' row lengths.
ROW_INDEX = tf.int64


def signature_of(batch: Sequence[TensorList]) -> tuple[Any, ...]:
    """One spec per output of ``batch``: dense where its samples share a shape, else
    ragged in the dimensions that differ (and in those before them)."""
    return tuple(_spec_of(out) for out in batch)


def _spec_of(out: TensorList) -> Any:
    dtype = tf.as_dtype(out.dtype)
    shapes = out.shape()
    if out.is_dense_tensor():
        return tf.TensorSpec([None, *shapes[0]], dtype) if shapes else \
            tf.TensorSpec(None, dtype)
    ndim = len(shapes[0])
    if any(len(s) != ndim for s in shapes):
        raise InvalidArgument(f"an output's samples have different ranks "
                              f"{sorted({len(s) for s in shapes})}: give the dataset an "
                              "output_signature")
    uniform = ndim
    while uniform > 0 and len({s[uniform - 1] for s in shapes}) == 1:
        uniform -= 1  # trailing dimensions equal in every sample stay uniform
    return tf.RaggedTensorSpec([None] * (1 + uniform) + list(shapes[0][uniform:]), dtype,
                               ragged_rank=uniform, row_splits_dtype=ROW_INDEX)


def value_of(out: TensorList, spec: Any, position: str) -> Any:
    """``out`` as ``spec`` describes it: a numpy array for a dense spec (TensorFlow takes
    it as a tensor), a ``tf.RaggedTensor`` for a ragged one. ``position``: which output
    of which batch, for the error raised when ``out`` does not fit."""
    if tf.as_dtype(out.dtype) != spec.dtype:
        raise InvalidArgument(f"{position} is {out.dtype}, its signature says "
                              f"{spec.dtype.name}")
    if isinstance(spec, tf.RaggedTensorSpec):
        return _ragged(out, spec, position)
    if not out.is_dense_tensor():
        raise InvalidArgument(f"{position} has samples of different shapes "
                              f"{sorted(set(out.shape()))}, its signature is dense "
                              f"{spec.shape}: give the dataset an output_signature with a "
                              "tf.RaggedTensorSpec for it")
    array = out.as_array()
    if not spec.shape.is_compatible_with(array.shape):
        raise InvalidArgument(f"{position} has shape {array.shape}, its signature says "
                              f"{spec.shape}: give the dataset an output_signature with "
                              "None for the dimensions that vary")
    return array


def _ragged(out: TensorList, spec: Any, position: str) -> Any:
    rank = spec.ragged_rank
    samples = list(out)
    if not samples:  # (no stream sends one; a batch needs a good sample)
        flat = np.zeros([d or 0 for d in spec.shape[1 + rank:]], dtype=out.dtype)
        return tf.RaggedTensor.from_nested_row_lengths(
            flat[np.newaxis][:0], [np.zeros(0, spec.row_splits_dtype.as_numpy_dtype)] * rank,
            validate=False)
    inner = samples[0].shape[rank:]  # the uniform dimensions: the same in every sample
    for sample in samples:
        if sample.ndim != spec.shape.rank - 1 or sample.shape[rank:] != inner or \
                not spec.shape[1:].is_compatible_with(sample.shape):
            raise InvalidArgument(f"{position} has a sample of shape {sample.shape}, its "
                                  f"signature says {spec.shape} (dimensions after the "
                                  f"first {rank} the same in every sample)")
    # Level k's row lengths: dimension k of each sample, once per row of level k - 1.
    index = spec.row_splits_dtype.as_numpy_dtype
    lengths = [np.concatenate([np.full(int(np.prod(s.shape[:level])), s.shape[level],
                                       dtype=index) for s in samples])
               for level in range(rank)]
    flat = np.concatenate([s.reshape(-1, *inner) for s in samples])
    return tf.RaggedTensor.from_nested_row_lengths(flat, lengths, validate=False)
