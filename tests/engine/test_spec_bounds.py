"""Bounded specs: every size a spec asks for is checked against named limits before the
server builds anything from it, in process and over real servers, and sizes known only
per sample are checked before their memory is allocated."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from conveyor import errors, fn, pipeline_def
from conveyor.definition.schemas.registry import encode_arg
from conveyor.v1 import checkpoint_pb2, pipeline_pb2, service_pb2, service_pb2_grpc
from conveyor_server import Pipeline
from conveyor_server.engine.admission.limits import EngineLimits, SpecBounds
from conveyor_server.engine.identity import checkpoint as ckpt
from tests.support.servers import DEADLINE, ServerProcess, Start, client

Spec = pipeline_pb2.PipelineSpec
#: The server's defaults (app/config.py).
SERVER_LIMITS = EngineLimits(max_batch_bytes=1 << 30, max_image_pixels=100_000_000,
                             max_extent=32766, spec=SpecBounds())


@pipeline_def(batch_size=4, seed=3, enable_checkpointing=True)
def sized_pipeline(root: str) -> Any:
    jpegs, labels = fn.readers.file(file_root=root, name="reader")        # op 0
    images = fn.decoders.image(jpegs)                                      # op 1
    widths = fn.random.uniform(range=(32.0, 48.0))                         # op 2
    images = fn.resize(images, resize_x=widths)                            # op 3
    return fn.crop_mirror_normalize(images, crop=(8, 8)), labels           # op 4


def sized(image_root: Path) -> Spec:
    return sized_pipeline(str(image_root / "imgs")).spec


def _set(op: pipeline_pb2.OpSpec, name: str, op_type: str, value: object) -> None:
    """Set a constant argument as a client would encode it, then let the mutation go past
    the client's own checks where it must."""
    op.args[name].CopyFrom(encode_arg(op_type, name, value))


def _fixed_resize(spec: Spec, size: tuple[float, float]) -> None:
    del spec.ops[3].arg_inputs["resize_x"]
    _set(spec.ops[3], "size", "resize", list(size))


def _many_ops(spec: Spec) -> None:
    for _ in range(300):
        spec.ops.add().CopyFrom(spec.ops[2])


def _long_list(spec: Spec) -> None:
    spec.ops[4].args["mean"].floats.values.extend([0.5] * 5000)


def _big_crops(spec: Spec) -> None:
    spec.batch_size = 4096
    _set(spec.ops[4], "crop", "crop_mirror_normalize", [300, 300])


def _far_ahead_source(spec: Spec) -> None:
    op = spec.ops.add(type="external_source", num_outputs=1)
    _set(op, "source", "external_source", "m:f")
    _set(op, "parallel", "external_source", True)
    _set(op, "prefetch_queue_depth", "external_source", 10**6)


#: (mutation, field named, limit named).
OVER_LIMITS: list[tuple[str, Callable[[Spec], None], str, str]] = [
    ("prefetch 10^9", lambda s: setattr(s, "prefetch_queue_depth", 10**9),
     "prefetch_queue_depth", "limits.max_prefetch_depth"),
    ("batch 10^9", lambda s: setattr(s, "batch_size", 10**9), "batch_size",
     "limits.max_batch_size"),
    ("threads 10^6", lambda s: setattr(s, "num_threads", 10**6), "num_threads",
     "limits.max_threads"),
    ("py_num_workers 10^6", lambda s: setattr(s, "py_num_workers", 10**6), "py_num_workers",
     "limits.max_threads"),
    ("a parallel source 10^6 batches ahead", _far_ahead_source,
     "ops[5].args.prefetch_queue_depth", "limits.max_prefetch_depth"),
    ("300 operators", _many_ops, "ops", "limits.max_ops"),
    ("a 17 MB file list", lambda s: s.ops[0].args["files"].strings.values.extend(
        ["d" * 4000] * 4300), "spec", "limits.max_spec_bytes"),
    ("a 5000-character path", lambda s: setattr(s.ops[0].args["file_root"], "s", "/" * 5000),
     "ops[0].args.file_root", "max_string_chars"),
    ("5000 means", _long_list, "ops[4].args.mean", "max_list_items"),
    ("a 300-character name", lambda s: setattr(s.ops[0], "name", "n" * 300), "ops[0].name",
     "max_name_chars"),
    ("resize to 10^6 x 10^6", lambda s: _fixed_resize(s, (1e6, 1e6)), "ops[3].args.size",
     "limits.max_extent"),
    ("resize to 30000 x 30000", lambda s: _fixed_resize(s, (3e4, 3e4)), "ops[3].args.size",
     "limits.max_image_pixels"),
    ("a draw of 10^6 values per sample", lambda s: _set(s.ops[2], "shape", "random.uniform",
                                                        [1000, 1000]),
     "ops[2].args.shape", "max_random_values"),
    ("4096 crops of 300 x 300 float32", _big_crops, "ops[4].args.crop",
     "limits.max_batch_bytes"),
]


@pytest.mark.parametrize(("mutate", "field", "limit"),
                         [pytest.param(m, f, lim, id=label) for label, m, f, lim in OVER_LIMITS])
def test_a_spec_over_a_limit_is_refused_naming_field_and_limit(
        image_root: Path, mutate: Callable[[Spec], None], field: str, limit: str) -> None:
    spec = sized(image_root)
    mutate(spec)
    started = time.perf_counter()
    with pytest.raises(errors.ResourceExhausted) as caught:
        Pipeline(spec, data_roots=[image_root], limits=SERVER_LIMITS)
    assert time.perf_counter() - started < 1.0
    assert caught.value.metadata == {"field": field, "limit": limit}
    assert caught.value.message.startswith(field) and limit in caught.value.message
    # The same spec builds where there are no bounds (in process, NO_LIMITS), as long as
    # building it allocates nothing in proportion to the size asked for.
    if field in ("ops[0].name", "ops[4].args.mean", "ops[2].args.shape"):
        Pipeline(spec, data_roots=[image_root]).close()


def test_sizes_known_only_per_sample_are_checked_before_allocating(image_root: Path) -> None:
    spec = sized(image_root)
    _set(spec.ops[2], "range", "random.uniform", [40_000.0, 50_000.0])  # widths per sample
    with Pipeline(spec, data_roots=[image_root], limits=SERVER_LIMITS) as pipe:
        with pytest.raises(errors.ResourceExhausted,
                           match=r"resize \(op 3\) on '.*\.jpg': its output would be "
                                 r"\d+x4\d{4}x3: 4\d,\d{3} pixels high or wide, above the "
                                 r"server's limit limits.max_extent = 32,766"):
            pipe.run()
        assert pipe.batches_returned == 0
    # Within the limits the same operator runs: the check refuses sizes, nothing else.
    with Pipeline(sized(image_root), data_roots=[image_root], limits=SERVER_LIMITS) as pipe:
        images, _ = pipe.run()
        assert images.as_array().shape == (4, 3, 8, 8)


def test_positions_past_the_furthest_are_refused(image_root: Path) -> None:
    spec = sized(image_root)
    with Pipeline(spec, data_roots=[image_root]) as pipe:
        pipe.run()
        body = pipe.checkpoint_body()
        with pytest.raises(errors.InvalidArgument, match="beyond the furthest position"):
            pipe.seek(2**62)
    # A checkpoint is checksummed, not signed: one sealed with a position past the furthest
    # is refused as corrupt, never built into a stream that would overflow.
    far = checkpoint_pb2.CheckpointBody()
    far.CopyFrom(body)
    far.batches = 2**63
    state = next(s for s in far.op_states if s.WhichOneof("state") == "random")
    beyond = checkpoint_pb2.CheckpointBody()
    beyond.CopyFrom(body)
    next(s for s in beyond.op_states if s.op == state.op).random.sample_index = 2**64 - 1
    for crafted in (far, beyond):
        with pytest.raises(errors.CorruptCheckpoint, match="beyond the furthest"):
            Pipeline(spec, checkpoint=ckpt.seal(crafted), data_roots=[image_root])


# -- over real servers ----------------------------------------------------------------------


def _create(server: ServerProcess, name: str, spec: Spec) -> tuple[grpc.RpcError, float]:
    """CreatePipeline straight through the generated stub (no client-side checks)."""
    with grpc.insecure_channel(server.address) as channel:
        stub = service_pb2_grpc.ConveyorStub(channel)
        started = time.perf_counter()
        with pytest.raises(grpc.RpcError) as caught:
            stub.CreatePipeline(service_pb2.CreatePipelineRequest(name=name, spec=spec),
                                timeout=DEADLINE)
        return caught.value, time.perf_counter() - started


def rss_kib(server: ServerProcess) -> int:
    assert server.proc is not None
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines()
                    if line.startswith("VmRSS:")))


def test_a_huge_prefetch_or_resize_is_refused_within_a_second(start_server: Start,
                                                              image_root: Path) -> None:
    server = start_server()
    before = rss_kib(server)
    prefetch = sized(image_root)
    prefetch.prefetch_queue_depth = 10**9
    resize = sized(image_root)
    _fixed_resize(resize, (1e9, 1e9))
    for spec, field in ((prefetch, "prefetch_queue_depth"), (resize, "ops[3].args.size")):
        error, seconds = _create(server, "huge", spec)
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
        assert error.details().startswith(field) and seconds < 1.0
    assert rss_kib(server) - before < 50 * 1024  # nothing was allocated for them
    with client(server) as c:
        assert c.pipelines() == []
        c.create("fine", sized(image_root)).run()


def test_restore_refuses_a_checkpoint_whose_spec_is_over_this_servers_limits(
        start_server: Start, image_root: Path) -> None:
    roomy = start_server()
    tight = start_server(env={"CONVEYOR_LIMITS_MAX_BATCH_SIZE": "2"})
    with client(roomy) as a, client(tight) as b:
        pipe = a.create("big", sized(image_root))
        pipe.run()
        saved = pipe.checkpoint()
        for source in (saved.id, saved.data):
            with pytest.raises(errors.ResourceExhausted,
                               match="batch_size: 4, above the server's limit "
                                     "limits.max_batch_size = 2") as caught:
                b.restore("big", checkpoint=source)
            assert caught.value.metadata["field"] == "batch_size"
        info = b.pipeline("big")
        assert info.holder == roomy.address  # nothing was taken over
        pipe.run()


def test_checkpoints_and_messages_are_bounded(start_server: Start, image_root: Path) -> None:
    server = start_server(env={"CONVEYOR_LIMITS_MAX_SPEC_BYTES": "1024"})
    with client(server) as c:
        spec = sized(image_root)
        spec.definition = "d" * 200
        spec.ops[0].name = "n" * 250
        spec.ops[1].name = "m" * 250
        spec.ops[4].name = "o" * 250
        with pytest.raises(errors.ResourceExhausted, match=r"^spec: encoded in 1,\d{3} bytes"):
            c.create("wordy", spec)
        with pytest.raises(errors.ResourceExhausted,
                           match=r"data: the checkpoint is 1,572,864 bytes, above the server's "
                                 r"limit of 1,049,600 \(limits.max_spec_bytes = 1,024 plus"):
            c.restore("wordy", checkpoint=b"\0" * (3 << 19))
    # A request beyond what any Restore needs is refused by gRPC before it is read.
    with grpc.insecure_channel(server.address) as channel:
        stub = service_pb2_grpc.ConveyorStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.Restore(service_pb2.RestoreRequest(name="x", data=b"\0" * (4 << 20)),
                         timeout=DEADLINE)
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    with client(server) as c:
        c.create("plain", sized(image_root)).run()
