"""The batch wire format: frames are valid messages, bounded in size, and reassemble
exactly into writable arrays."""

from __future__ import annotations

import numpy as np
import pytest

from conveyor.tensor_list import TensorList
from conveyor.transport.wire import BatchAssembler, encode_frames
from conveyor.v1 import service_pb2


def outputs(rng: np.random.Generator) -> tuple[TensorList, ...]:
    images = [rng.integers(0, 256, (int(rng.integers(1, 40)), 33, 3), dtype=np.uint8)
              for _ in range(5)]
    labels = [np.array([i], dtype=np.int32) for i in range(5)]
    angles = [np.array(rng.uniform(-30, 30), dtype=np.float32) for _ in range(5)]
    empty = [np.zeros((0, 4), dtype=np.float64) for _ in range(5)]
    strided = [rng.normal(size=(6, 8)).astype(np.float16)[:, ::2] for _ in range(5)]
    return (TensorList(images, "HWC"), TensorList(labels), TensorList(angles),
            TensorList(empty), TensorList(strided, "HW"))


@pytest.mark.parametrize("frame_bytes", [7, 1000, 1 << 20])
def test_frames_reassemble_exactly(frame_bytes: int) -> None:
    batch = outputs(np.random.default_rng(frame_bytes))
    frames = list(encode_frames(41, batch, frame_bytes))
    assembler = BatchAssembler()
    got = None
    for i, frame in enumerate(frames):
        message = service_pb2.StreamBatchesResponse.FromString(frame)
        assert len(message.data) <= frame_bytes
        assert message.HasField("header") == (i == 0)
        got = assembler.feed(frame)
        assert (got is None) == (i < len(frames) - 1)
    assert got is not None
    for sent, received in zip(batch, got, strict=True):
        assert received.layout() == sent.layout() and received.dtype == sent.dtype
        for a, b in zip(sent, received, strict=True):
            assert a.shape == b.shape and np.array_equal(a, b) and b.flags.writeable


def test_a_batch_without_data_bytes_is_one_header_frame() -> None:
    empty = (TensorList([np.zeros((0,), np.uint8)] * 3),)
    frames = list(encode_frames(0, empty))
    assert len(frames) == 1
    got = BatchAssembler().feed(frames[0])
    assert got is not None and [s.shape for s in got[0]] == [(0,)] * 3


def test_a_received_batch_stacks_without_a_copy() -> None:
    rng = np.random.default_rng(3)
    images = TensorList([rng.integers(0, 256, (4, 5, 3), dtype=np.uint8) for _ in range(6)])
    labels = TensorList([np.array([i], dtype=np.int32) for i in range(6)])
    assembler = BatchAssembler()
    got = None
    for frame in encode_frames(0, (images, labels), frame_bytes=100):
        got = assembler.feed(frame)
    assert got is not None
    for sent, received in zip((images, labels), got, strict=True):
        stacked = received.as_array()
        assert np.array_equal(stacked, np.stack(list(sent)))
        assert np.shares_memory(stacked, received[0]) and stacked.flags.writeable
    # Samples that are separate arrays are stacked into a new one.
    assert not np.shares_memory(images.as_array(), images[0])
