"""Errors trainers can branch on, from real servers: every status carries a
``google.rpc.Status`` with an ``ErrorInfo`` (reason, metadata), and the client raises the
exact class with its metadata."""

from __future__ import annotations

import signal
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from conveyor import errors
from conveyor.definition.schemas.registry import encode_arg
from conveyor.v1 import service_pb2, service_pb2_grpc
from conveyor_server.demo.run import rotate_pipeline
from tests.support.servers import Start, client


def test_fenced_already_exists_and_spec_mismatch_carry_reason_and_metadata(
        start_server: Start, image_root: Path) -> None:
    a, b = start_server(), start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    with client(a) as ca, client(b) as cb:
        pipe = ca.create("rich", spec)
        pipe.run()
        saved = pipe.checkpoint()
        with pytest.raises(errors.AlreadyExists) as exists:
            cb.create("rich", spec)
        assert exists.value.reason == "ALREADY_EXISTS"
        assert exists.value.metadata == {"holder": a.address}
        with pytest.raises(errors.SpecMismatch, match="seed: checkpoint has") as mismatch:
            cb.restore("rich", checkpoint=saved.id,
                       spec=rotate_pipeline(str(image_root / "imgs"), batch_size=2, seed=1))
        assert isinstance(mismatch.value, errors.CheckpointMismatch)
        assert mismatch.value.code == "FAILED_PRECONDITION"
        cb.restore("rich", checkpoint=saved.id)
        with pytest.raises(errors.Fenced) as fenced:
            ca.checkpoint("rich", 1)
        assert fenced.value.reason == "FENCED" and fenced.value.metadata["holder"] == b.address


def test_a_bad_argument_names_op_and_argument_in_its_metadata(start_server: Start,
                                                             image_root: Path) -> None:
    server = start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2).spec
    rotate = next(op for op in spec.ops if op.type == "rotate")
    rotate.args["interp_type"].CopyFrom(encode_arg("rotate", "interp_type", "nn"))
    rotate.args["interp_type"].s = "bogus"  # past the client's own check
    with client(server) as c, pytest.raises(errors.SpecError) as caught:
        c.create("bad", spec)
    assert caught.value.metadata == {"op": "rotate", "argument": "interp_type"}
    assert (caught.value.op, caught.value.argument) == ("rotate", "interp_type")
    # Any gRPC client can read the reason: it is a standard google.rpc.ErrorInfo.
    with grpc.insecure_channel(server.address) as channel:
        stub = service_pb2_grpc.ConveyorStub(channel)
        with pytest.raises(grpc.RpcError) as raw:
            stub.CreatePipeline(service_pb2.CreatePipelineRequest(name="bad", spec=spec))
        status = rpc_status.from_call(raw.value)
        info = error_details_pb2.ErrorInfo()
        assert status is not None and status.details[0].Unpack(info)
        assert (info.reason, info.domain) == ("SPEC_ERROR", "conveyor")


def test_a_drain_is_draining_with_the_checkpoint_in_its_metadata(start_server: Start,
                                                                  image_root: Path) -> None:
    a = start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    with client(a) as c:
        pipe = c.create("drained", spec)
        pipe.run()
        assert a.proc is not None
        a.proc.send_signal(signal.SIGTERM)
        with pytest.raises(errors.Draining) as caught:
            for _ in range(1000):
                pipe.run()
    meta = caught.value.metadata
    assert meta["checkpoint_id"].startswith("drained:") and int(meta["checkpoint_batches"]) >= 1
    assert caught.value.checkpoint_id == meta["checkpoint_id"]  # type: ignore[attr-defined]
    assert isinstance(caught.value, errors.Unavailable)
