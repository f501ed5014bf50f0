"""Malformed requests, from real servers: INVALID_ARGUMENT naming what is wrong (or
DATA_LOSS for a damaged checkpoint), never INTERNAL or UNKNOWN; and an INTERNAL answer,
when a bug or corrupt server state causes one, carries an error id and nothing else."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

import grpc
import numpy as np
import pytest
import redis
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from conveyor import errors
from conveyor.definition.schemas.registry import encode_arg
from conveyor.transport.channel import SERVICE_NAME, STREAM_BATCHES_PATH
from conveyor.v1 import pipeline_pb2, service_pb2
from conveyor_server import Pipeline
from conveyor_server.demo.run import rotate_pipeline
from conveyor_server.service.status import MAX_MESSAGE_BYTES, clipped
from tests.support.servers import DEADLINE, ServerProcess, Start, client

Spec = pipeline_pb2.PipelineSpec
UNARY = ("CreatePipeline", "DeletePipeline", "ListPipelines", "DescribePipeline",
         "Checkpoint", "Restore", "ListCheckpoints", "GetCheckpoint")


def raw_unary(server: ServerProcess, method: str, body: bytes) -> grpc.RpcError | None:
    """Send ``body`` as the request of ``method``, bytes as they are; the error, if any."""
    with grpc.insecure_channel(server.address) as channel:
        call = channel.unary_unary(f"/{SERVICE_NAME}/{method}")
        try:
            call(body, timeout=DEADLINE)
        except grpc.RpcError as exc:
            return exc
    return None


def error_info(exc: grpc.RpcError) -> error_details_pb2.ErrorInfo:
    status = rpc_status.from_call(exc)
    info = error_details_pb2.ErrorInfo()
    assert status is not None and status.details[0].Unpack(info)
    return info


@pytest.mark.parametrize("body", [b"\xff\xff\xff", b"\x0a\x05abc", b"\x0a\x02\xc3\x28"],
                         ids=["garbage", "truncated", "not UTF-8"])
def test_bytes_that_are_not_the_request_are_invalid_argument(start_server: Start,
                                                            body: bytes) -> None:
    server = start_server()
    for method in UNARY:
        if method == "ListPipelines" and body.startswith(b"\x0a\x02"):
            continue  # field 1 is not one of its fields: kept as an unknown field
        exc = raw_unary(server, method, body)
        assert exc is not None and exc.code() == grpc.StatusCode.INVALID_ARGUMENT, method
        assert f"not a valid conveyor.v1.{method}Request" in exc.details(), exc.details()
    with grpc.insecure_channel(server.address) as channel:
        stream = channel.stream_stream(STREAM_BATCHES_PATH)
        with pytest.raises(grpc.RpcError) as caught:
            next(iter(stream(iter([body]), timeout=DEADLINE)))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert client(server).pipelines() == []  # it serves on


def test_a_malformed_acknowledgement_ends_the_stream_with_invalid_argument(
        start_server: Start, image_root: Path) -> None:
    server = start_server()
    with client(server) as c:
        c.create("acked", rotate_pipeline(str(image_root / "imgs"), batch_size=2))
    first = service_pb2.StreamBatchesRequest(name="acked").SerializeToString()
    with grpc.insecure_channel(server.address) as channel:
        stream = channel.stream_stream(STREAM_BATCHES_PATH)
        frames = stream(iter([first, b"\xff\xff"]), timeout=DEADLINE)
        with pytest.raises(grpc.RpcError) as caught:
            for _ in frames:
                pass
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "StreamBatchesRequest" in caught.value.details()


def _ref(spec: Spec, op: int, to: int) -> None:
    spec.ops[op].inputs[0].op = to


#: Specs a client's own checks would have refused, sent straight to the server.
MALFORMED: list[tuple[str, Callable[[Spec], object], str]] = [
    ("NaN range", lambda s: s.ops[2].args["range"].floats.values.__setitem__(0, math.nan),
     "random.uniform: argument 'range': got nan: only finite numbers"),
    ("infinite fill", lambda s: s.ops[3].args["fill_value"].floats.values.append(math.inf),
     "rotate: argument 'fill_value': got inf"),
    ("NUL in a path", lambda s: setattr(s.ops[0].args["file_root"], "s", "/data\0/x"),
     "readers.file: argument 'file_root': contains a NUL character"),
    ("a 300-byte file name", lambda s: setattr(s.ops[0].args["file_root"], "s",
                                               s.ops[0].args["file_root"].s + "/" + "z" * 300),
     "ops[0].args.file_root: a path component of 300 bytes"),
    ("forward reference", lambda s: _ref(s, 1, 3), "decoders.image (op 1): input refers to "
                                                   "op 3, which does not come before it"),
    ("cycle", lambda s: _ref(s, 3, 3), "rotate (op 3): input refers to op 3"),
    ("two inputs", lambda s: s.ops[3].inputs.add(), "rotate (op 3): takes 1 input(s), got 2"),
    ("unknown operator", lambda s: setattr(s.ops[3], "type", "warp"),
     "warp: unknown operator"),
    ("wrong kind", lambda s: setattr(s.ops[3].args["fill_value"], "s", "zero"),
     "rotate: argument 'fill_value': got 'zero'"),
    ("no value", lambda s: s.ops[3].args["fill_value"].Clear(),
     "rotate: argument 'fill_value': got None"),
    ("out-of-range enum", lambda s: setattr(s.ops[1].args["output_type"], "s", "CMYK"),
     "decoders.image: argument 'output_type': got 'CMYK'"),
    ("missing required", lambda s: s.ops[3].arg_inputs.pop("angle"),
     "rotate: argument 'angle': is required"),
    ("negative shape", lambda s: s.ops[2].args["shape"].ints.values.append(-4),
     "random.uniform: argument 'shape': got [-4]"),
    ("no batch size", lambda s: s.ClearField("batch_size"), "batch_size must be >= 1"),
    ("other spec version", lambda s: setattr(s, "spec_version", 9), "spec_version 9"),
    ("missing output", lambda s: setattr(s.outputs[0], "op", 40),
     "output refers to op 40 output 0"),
    ("unknown device", lambda s: setattr(s.ops[3], "device", "tpu"),
     "rotate: argument 'device': got 'tpu'"),
]


def test_a_malformed_spec_is_invalid_argument_naming_what_is_wrong(
        start_server: Start, image_root: Path) -> None:
    server = start_server()
    wrong = []
    for label, mutate, message in MALFORMED:
        spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2).spec
        mutate(spec)
        request = service_pb2.CreatePipelineRequest(name="bad", spec=spec)
        exc = raw_unary(server, "CreatePipeline", request.SerializeToString())
        if exc is None or exc.code() != grpc.StatusCode.INVALID_ARGUMENT \
                or message not in exc.details():
            wrong.append(f"{label}: {exc.code() if exc else 'OK'} "
                         f"{exc.details() if exc else ''}")
    assert not wrong, "\n".join(wrong)
    assert client(server).pipelines() == []


def test_positions_and_requests_that_cannot_be_are_invalid_argument(
        start_server: Start, image_root: Path) -> None:
    server = start_server()
    with client(server) as c:
        pipe = c.create("pos", rotate_pipeline(str(image_root / "imgs"), batch_size=2))
        pipe.run()
        saved = pipe.checkpoint()
        with pytest.raises(errors.InvalidArgument, match="beyond the furthest position"):
            c.restore("pos-copy", checkpoint=saved.id, consumed=2**64 - 1)
        with pytest.raises(errors.InvalidArgument, match="needs a checkpoint_id"):
            c.call("Restore", service_pb2.RestoreRequest(name="pos-copy"))
        with pytest.raises(errors.InvalidArgument, match="checkpoint id"):
            c.restore("pos-copy", checkpoint="no id at all")
        with pytest.raises(errors.DataLoss):
            c.restore("pos-copy", checkpoint=b"\x0a\x03abc")
        names = [p.name for p in c.pipelines()]
        assert names == ["pos"]  # nothing was taken over or created
        pipe.close()
    with grpc.insecure_channel(server.address) as channel:
        stream = channel.stream_stream(STREAM_BATCHES_PATH)
        request = service_pb2.StreamBatchesRequest(name="pos", consumed=2**64 - 1)
        with pytest.raises(grpc.RpcError) as caught:
            next(iter(stream(iter([request.SerializeToString()]), timeout=DEADLINE)))
        assert caught.value.code() in (grpc.StatusCode.INVALID_ARGUMENT,
                                       grpc.StatusCode.FAILED_PRECONDITION)


def test_a_huge_name_is_answered_with_its_own_code_and_a_short_message(
        start_server: Start) -> None:
    server = start_server()
    name = "\u00e9" * 100_000  # 200 KB in UTF-8, more once percent-encoded in a trailer
    for method, request in (
            ("DescribePipeline", service_pb2.DescribePipelineRequest(name=name)),
            ("Restore", service_pb2.RestoreRequest(name="x", checkpoint_id=name))):
        exc = raw_unary(server, method, request.SerializeToString())
        assert exc is not None and exc.code() == grpc.StatusCode.INVALID_ARGUMENT, exc
        assert len(exc.details().encode()) <= MAX_MESSAGE_BYTES
        assert re.search(r"\.\.\. \([\d,]+ bytes more\)$", exc.details())


def test_clipped_keeps_short_text_and_cuts_long_text_on_a_character() -> None:
    assert clipped("short", 64) == "short"
    long = "\u4e2d" * 1000
    cut = clipped(long, 100)
    assert len(cut.encode()) <= 100 and cut.startswith("\u4e2d" * 20)
    assert cut.endswith("bytes more)") and "\ufffd" not in cut


def test_an_internal_error_carries_an_id_and_its_details_go_to_the_log_only(
        start_server: Start, redis_client: redis.Redis) -> None:
    server = start_server()
    # Corrupt server state, not a client's input: an owner record without its holder.
    redis_client.hset("conveyor:{broken}:owner", "generation", "3")
    request = service_pb2.DescribePipelineRequest(name="broken")
    exc = raw_unary(server, "DescribePipeline", request.SerializeToString())
    assert exc is not None and exc.code() == grpc.StatusCode.INTERNAL
    match = re.fullmatch(r"internal error ([0-9a-f]{16}) \(the server's log has the details "
                         r"under this id\)", exc.details())
    assert match, exc.details()
    error_id = match.group(1)
    info = error_info(exc)
    assert (info.reason, info.metadata["error_id"]) == ("INTERNAL", error_id)
    assert "KeyError" not in exc.details() and "holder" not in exc.details()
    log = server.log()
    line = next(x for x in log.splitlines() if error_id in x)
    assert "DescribePipeline failed: internal error" in line and "KeyError" in line
    assert "Traceback" in log.split(error_id, 1)[1]
    # The Python client raises it with the id.
    with client(server) as c, pytest.raises(errors.Internal) as caught:
        c.pipeline("broken")
    assert re.fullmatch(r"[0-9a-f]{16}", caught.value.metadata["error_id"])
    assert caught.value.metadata["error_id"] != error_id  # one id per failure


# -- any output fed to any operator, in process ----------------------------------------------


def _fed(draw_shape: list[int], op_type: str, **args: object) -> Spec:
    """A random draw of ``draw_shape`` (any array a spec can make) fed to ``op_type``."""
    spec = pipeline_pb2.PipelineSpec(spec_version=1, batch_size=2, num_threads=1)
    draw = spec.ops.add(type="random.uniform", device="cpu", num_outputs=1)
    draw.args["shape"].CopyFrom(encode_arg("random.uniform", "shape", draw_shape))
    op = spec.ops.add(type=op_type, device="cpu", num_outputs=1)
    op.inputs.add(op=0, output=0)
    for name, value in args.items():
        op.args[name].CopyFrom(encode_arg(op_type, name, value))
    spec.outputs.add(op=1, output=0)
    return spec


@pytest.mark.parametrize(("shape", "op_type", "args", "message"), [
    ([0, 5, 3], "rotate", {"angle": 10.0}, r"shape \(0, 5, 3\)"),
    ([5, 0, 3], "resize", {"size": [4.0, 4.0]}, r"shape \(5, 0, 3\)"),
    ([5, 5, 0], "flip", {}, r"shape \(5, 5, 0\)"),
    ([1, 1, 600], "resize", {"size": [4.0, 4.0]}, "up to 512 channels"),
])
def test_an_array_that_is_no_image_is_invalid_argument(shape: list[int], op_type: str,
                                                       args: dict[str, object],
                                                       message: str) -> None:
    with Pipeline(_fed(shape, op_type, **args)) as pipe, \
            pytest.raises(errors.InvalidArgument, match=message):
        pipe.run()


def test_one_value_samples_and_one_number_lists_are_taken() -> None:
    with Pipeline(_fed([], "cast", dtype="int32")) as pipe:  # 0-d samples
        values = pipe.run()[0]
        assert [v.shape for v in values] == [(), ()] and values.dtype == np.int32
    spec = _fed([4, 4, 3], "crop_mirror_normalize")
    spec.ops[1].args["mean"].f = 0.5  # one number where the schema has a list
    with Pipeline(spec) as pipe:
        assert pipe.run()[0].as_array().shape == (2, 3, 4, 4)
