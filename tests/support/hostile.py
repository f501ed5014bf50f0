"""Hostile inputs for the fuzz tests: hypothesis strategies for pipeline specs and for every
request message of ``conveyor.v1.Conveyor``, and calls that report only a status code.

Specs are mostly *nearly* valid (a reader of the test's data set and a decoder, then
operators from the schemas with arguments of the right kind, some of them extreme), so
that many pass validation and reach the builder and the operators; the rest are random.
Numbers favour the edges: 0, 1, the limits and one past them, 2^31, 2^32 - 1, 2^63,
NaN and infinities, huge and negative values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import grpc
from hypothesis import strategies as st

from conveyor.definition.schemas.registry import SCHEMAS, Arg
from conveyor.transport.channel import SERVICE_NAME
from conveyor.v1 import checkpoint_pb2, pipeline_pb2, service_pb2
from conveyor_server.engine.identity import checkpoint as ckpt
from conveyor_server.service.registration import CONVEYOR

#: Every method of the service, and whether it streams.
METHODS = [(m.name, m.client_streaming or m.server_streaming) for m in CONVEYOR.methods]
#: Codes that must never answer a request: a bug (UNKNOWN, INTERNAL), or a server that
#: hangs or died (DEADLINE_EXCEEDED, UNAVAILABLE).
FORBIDDEN = frozenset({grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL,
                       grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE})
#: Names the fuzz's live pipelines use, so that requests often reach a real one.
LIVE_NAMES = ("live", "fuzz", "victim")

EDGE_INTS = (0, 1, 2, 3, 4, 63, 64, 65, 4095, 4096, 4097, 2**31 - 1, 2**31, 2**32 - 1)


def mostly(usual: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any],
           weight: int = 5) -> st.SearchStrategy[Any]:
    """``usual`` ``weight`` times as often as ``hostile``: a spec draws many values, and
    one hostile value is enough to refuse it, so most must be ordinary for specs to get
    past validation to the builder and the operators."""
    return st.integers(0, weight).flatmap(lambda i: hostile if i == weight else usual)


def rarely(draw: st.DrawFn, one_in: int = 10) -> bool:
    """True once in about ``one_in`` draws (hypothesis favours small integers, so the rare
    case is the largest one)."""
    return bool(draw(st.integers(0, one_in - 1)) == one_in - 1)


def uint32s() -> st.SearchStrategy[int]:
    return st.one_of(st.integers(0, 8), st.sampled_from(EDGE_INTS), st.integers(0, 2**32 - 1))


def uint64s() -> st.SearchStrategy[int]:
    return st.one_of(st.integers(0, 16), st.sampled_from((*EDGE_INTS, 2**62, 2**63, 2**64 - 1)),
                     st.integers(0, 2**64 - 1))


def int64s() -> st.SearchStrategy[int]:
    return mostly(st.integers(-1, 16), st.one_of(st.sampled_from(
        (*EDGE_INTS, -1, -(2**31), 2**62, 2**63 - 1, -(2**63))),
        st.integers(-(2**63), 2**63 - 1)))


def floats() -> st.SearchStrategy[float]:
    return mostly(st.floats(-100.0, 500.0), st.one_of(st.floats(-100.0, 5000.0), st.sampled_from(
        (0.0, -0.0, 0.5, 1.0, 8.0, 224.0, 1e-300, 1e9, 1e300, -1e300, math.nan, math.inf,
         -math.inf)), st.floats()))


def texts(*known: str) -> st.SearchStrategy[str]:
    """Text: often one of ``known``, else short random text, now and then a long one."""
    usual = st.one_of(st.sampled_from(known), st.text(max_size=12)) if known \
        else st.text(max_size=12)
    return mostly(usual, st.integers(0, 6000).map(lambda n: "\u00e9" * n))


def names() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(LIVE_NAMES), st.from_regex(r"[a-z0-9][a-z0-9._-]{0,20}",
                                                                fullmatch=True),
                     texts("", "-", "a b", "x" * 129, "live\0"))


def lists(elements: st.SearchStrategy[Any], fill: Any) -> st.SearchStrategy[list[Any]]:
    """Short lists of ``elements``, or now and then a long one of ``fill``."""
    return mostly(st.lists(elements, max_size=5),
                  st.integers(0, 6000).map(lambda n: [fill] * n))


def arguments() -> st.SearchStrategy[pipeline_pb2.Argument]:
    """An argument of any kind, or one with no value."""
    arg = pipeline_pb2.Argument
    return st.one_of(
        st.builds(lambda v: arg(i=v), int64s()), st.builds(lambda v: arg(f=v), floats()),
        st.builds(lambda v: arg(s=v), texts("RGB", "linear", "fail", "CHW", "uint8")),
        st.builds(lambda v: arg(b=v), st.booleans()),
        st.builds(lambda v: arg(ints=pipeline_pb2.IntList(values=v)), lists(int64s(), 7)),
        st.builds(lambda v: arg(floats=pipeline_pb2.FloatList(values=v)), lists(floats(), 8.0)),
        st.builds(lambda v: arg(strings=pipeline_pb2.StringList(values=v)),
                  lists(texts(), "x")),
        st.just(arg()))


def argument_for(spec: Arg) -> st.SearchStrategy[pipeline_pb2.Argument]:
    """An argument of ``spec``'s kind (values at the edges), or now and then any argument."""
    arg = pipeline_pb2.Argument
    kind = spec.kind
    if kind == "int":
        typed = st.builds(lambda v: arg(i=v), int64s())
    elif kind == "float":
        typed = st.builds(lambda v: arg(f=v), floats())
    elif kind == "bool":
        typed = st.builds(lambda v: arg(b=v), st.booleans())
    elif kind in ("str", "enum"):
        typed = st.builds(lambda v: arg(s=v), texts(*spec.choices))
    elif kind == "ints":
        typed = st.builds(lambda v: arg(ints=pipeline_pb2.IntList(values=v)),
                          lists(int64s(), 7))
    elif kind == "floats":
        sized = st.lists(floats(), min_size=spec.lengths[0], max_size=spec.lengths[-1]) \
            if spec.lengths else lists(floats(), 8.0)
        typed = st.builds(lambda v: arg(floats=pipeline_pb2.FloatList(values=v)), sized)
    else:
        typed = st.builds(lambda v: arg(strings=pipeline_pb2.StringList(values=v)),
                          lists(texts(), "x"))
    return mostly(typed, arguments())


@st.composite
def near_valid_specs(draw: st.DrawFn, data_dir: str) -> pipeline_pb2.PipelineSpec:
    """A reader of ``data_dir`` and a decoder, then up to four operators."""
    spec = pipeline_pb2.PipelineSpec(
        spec_version=draw(mostly(st.just(1), st.sampled_from((0, 2)), 9)),
        batch_size=draw(mostly(st.integers(1, 4), uint32s(), 9)),
        num_threads=draw(mostly(st.integers(0, 2), uint32s(), 9)),
        seed=draw(uint64s()), enable_checkpointing=draw(st.booleans()),
        prefetch_queue_depth=draw(mostly(st.integers(0, 2), uint32s(), 9)),
        device_id=draw(st.sampled_from((-1, 0, 1, 2**31 - 1, -(2**31)))))
    reader = spec.ops.add(type="readers.file", device="cpu", num_outputs=2)
    reader.args["file_root"].s = data_dir
    if rarely(draw):  # a path elsewhere, or one no file system holds
        path = draw(texts("/", "/etc", f"{data_dir}/..", f"{data_dir}/{'z' * 300}", "\0"))
        reader.args[draw(st.sampled_from(("file_root", "file_list")))].s = path
    _draw_args(draw, reader, SCHEMAS["readers.file"].args, skip=("file_root", "file_list",
                                                                 "files"))
    decoder = spec.ops.add(type="decoders.image", device=draw(mostly(
        st.just("cpu"), st.sampled_from(("mixed", "gpu", "tpu")))), num_outputs=1)
    decoder.inputs.add(op=0, output=0)
    _draw_args(draw, decoder, SCHEMAS["decoders.image"].args)
    image = 1
    for _ in range(draw(st.integers(0, 4))):
        op_type = draw(st.sampled_from([*sorted(set(SCHEMAS) - {"readers.file"}), "warp", ""]))
        schema = SCHEMAS.get(op_type)
        index = len(spec.ops)
        op = spec.ops.add(type=op_type, device="cpu",
                          num_outputs=len(schema.outputs) if schema else 1)
        if rarely(draw):
            op.num_outputs = draw(uint32s())
        if schema is None:
            continue
        for _ in range(schema.num_inputs):  # the last image, or any earlier output
            source = draw(st.integers(0, index - 1)) if rarely(draw, 4) else image
            op.inputs.add(op=source, output=draw(st.integers(0, 1)) if source == 0 else 0)
        if rarely(draw):  # a forward, cyclic or missing reference
            op.inputs.add(op=draw(st.sampled_from((index, index + 1, 2**32 - 1))), output=0)
        _draw_args(draw, op, schema.args)
        for name, arg in schema.args.items():
            if arg.tensor and name not in op.args and draw(st.integers(0, 2)) == 0:
                op.arg_inputs[name].op = draw(st.integers(0, index - 1))
        if schema.num_inputs:
            image = index
    spec.outputs.add(op=image, output=0)
    if draw(st.booleans()):
        spec.outputs.add(op=0, output=1)
    if rarely(draw):
        spec.outputs.add(op=draw(uint32s()), output=draw(uint32s()))
    return spec


def _draw_args(draw: st.DrawFn, op: pipeline_pb2.OpSpec, schema: dict[str, Arg] | Any,
               skip: Sequence[str] = ()) -> None:
    required = [name for name, arg in schema.items() if arg.required and not arg.tensor]
    for name in sorted({*required, *draw(st.lists(st.sampled_from(sorted(schema)), max_size=2))}):
        if name not in skip:
            op.args[name].CopyFrom(draw(argument_for(schema[name])))
    if rarely(draw, 20):
        op.args[draw(texts("bogus", ""))].CopyFrom(draw(arguments()))


@st.composite
def random_specs(draw: st.DrawFn) -> pipeline_pb2.PipelineSpec:
    """Anything a PipelineSpec can hold, with little regard for the schemas."""
    spec = pipeline_pb2.PipelineSpec(
        spec_version=draw(uint32s()), batch_size=draw(uint32s()),
        num_threads=draw(uint32s()), seed=draw(uint64s()),
        prefetch_queue_depth=draw(uint32s()), definition=draw(texts()))
    for _ in range(draw(st.integers(0, 4))):
        op = spec.ops.add(type=draw(texts(*SCHEMAS)), name=draw(texts()),
                          device=draw(texts("cpu", "gpu")), num_outputs=draw(uint32s()))
        for _ in range(draw(st.integers(0, 2))):
            op.inputs.add(op=draw(uint32s()), output=draw(uint32s()))
        for _ in range(draw(st.integers(0, 3))):
            op.args[draw(texts("size", "crop", "shape", "angle"))].CopyFrom(draw(arguments()))
        if draw(st.booleans()):
            op.arg_inputs[draw(texts("angle"))].op = draw(uint32s())
    for _ in range(draw(st.integers(0, 2))):
        spec.outputs.add(op=draw(uint32s()), output=draw(uint32s()))
    return spec


def specs(data_dir: str) -> st.SearchStrategy[pipeline_pb2.PipelineSpec]:
    return st.one_of(near_valid_specs(data_dir), near_valid_specs(data_dir), random_specs())


@st.composite
def crafted_blobs(draw: st.DrawFn, body: checkpoint_pb2.CheckpointBody,
                  data_dir: str) -> bytes:
    """A checkpoint with a valid checksum and hostile contents: a checksum is not a
    signature, so anyone can seal what they like."""
    crafted = checkpoint_pb2.CheckpointBody()
    crafted.CopyFrom(body)
    change = draw(st.sampled_from(("batches", "states", "spec", "file_lists", "version")))
    if change == "batches":
        crafted.batches = draw(uint64s())
    elif change == "states":
        del crafted.op_states[draw(st.integers(0, len(crafted.op_states))):]
        for _ in range(draw(st.integers(0, 2))):
            state = crafted.op_states.add(op=draw(uint32s()))
            if draw(st.booleans()):
                state.reader.epoch, state.reader.position = draw(uint64s()), draw(uint64s())
            else:
                state.random.sample_index = draw(uint64s())
    elif change == "spec":
        crafted.spec.CopyFrom(draw(specs(data_dir)))
        crafted.fingerprint = _fingerprint(crafted.spec)
    elif change == "file_lists":
        crafted.file_lists.add(op=draw(uint32s()), num_files=draw(uint64s()))
    else:
        crafted.format_version = draw(uint32s())
    return ckpt.seal(crafted)


def _fingerprint(spec: pipeline_pb2.PipelineSpec) -> bytes:
    from conveyor.definition.spec import fingerprint
    return fingerprint(spec)


def checkpoint_sources(real_ids: Sequence[str], real_blobs: Sequence[bytes],
                       body: checkpoint_pb2.CheckpointBody,
                       data_dir: str) -> st.SearchStrategy[dict[str, Any]]:
    ids = st.one_of(st.sampled_from(real_ids), texts("live:1", "live:0", "x:1-0123456789abcdef"),
                    st.from_regex(r"[a-z]{1,8}:[1-9][0-9]{0,19}(-[0-9a-f]{16})?",
                                  fullmatch=True))
    blobs = st.one_of(st.sampled_from(real_blobs), st.binary(max_size=64),
                      crafted_blobs(body, data_dir))
    return st.one_of(st.builds(lambda v: {"checkpoint_id": v}, ids),
                     st.builds(lambda v: {"data": v}, blobs), st.just({}))


def requests(data_dir: str, real_ids: Sequence[str], real_blobs: Sequence[bytes],
             body: checkpoint_pb2.CheckpointBody) -> st.SearchStrategy[tuple[str, Any]]:
    """(method, request message) for every method of the service."""
    sv = service_pb2
    optional = st.one_of(st.just({}), st.builds(lambda v: {"consumed": v}, uint64s()))
    return st.one_of(
        st.builds(lambda n, s, k: ("CreatePipeline", sv.CreatePipelineRequest(
            name=n, spec=s, keep_checkpoints=k)), names(), specs(data_dir), uint32s()),
        st.builds(lambda n, k, f: ("DeletePipeline", sv.DeletePipelineRequest(
            name=n, keep_checkpoints=k, force=f)), names(), st.booleans(), st.booleans()),
        st.just(("ListPipelines", sv.ListPipelinesRequest())),
        st.builds(lambda n: ("DescribePipeline", sv.DescribePipelineRequest(name=n)), names()),
        st.builds(lambda n, c: ("StreamBatches", sv.StreamBatchesRequest(name=n, consumed=c)),
                  names(), uint64s()),
        st.builds(lambda n, o: ("Checkpoint", sv.CheckpointRequest(name=n, **o)), names(),
                  optional),
        st.builds(lambda n, src, o, k, s: ("Restore", sv.RestoreRequest(
            name=n, keep_checkpoints=k, **src, **o, **s)), names(),
            checkpoint_sources(real_ids, real_blobs, body, data_dir), optional, uint32s(),
            st.one_of(st.just({}), st.builds(lambda v: {"spec": v}, specs(data_dir)))),
        st.builds(lambda n: ("ListCheckpoints", sv.ListCheckpointsRequest(name=n)), names()),
        st.builds(lambda i: ("GetCheckpoint", sv.GetCheckpointRequest(id=i)),
                  st.one_of(st.sampled_from(real_ids), texts())))


def raw_bodies(valid: Sequence[bytes]) -> st.SearchStrategy[bytes]:
    """Bytes for a request body: random, or a valid message cut, extended or bit-flipped."""
    def flip(data: bytes, at: int, bit: int) -> bytes:
        if not data:
            return data
        i = at % len(data)
        return data[:i] + bytes([data[i] ^ (1 << bit)]) + data[i + 1:]
    message = st.sampled_from(valid)
    return st.one_of(
        st.binary(max_size=96),
        st.builds(lambda m, n: m[:n], message, st.integers(0, 96)),
        st.builds(lambda m, tail: m + tail, message, st.binary(max_size=16)),
        st.builds(flip, message, st.integers(0, 2**16), st.integers(0, 7)))


def call(channel: grpc.Channel, method: str, streaming: bool, body: bytes,
         timeout: float) -> grpc.StatusCode:
    """Send ``body`` as ``method``'s request (bytes as they are): OK, or the error's code.
    A stream counts as OK once it sends its first frame; it is cancelled then."""
    path = f"/{SERVICE_NAME}/{method}"
    try:
        if streaming:
            frames = channel.stream_stream(path)(iter([body]), timeout=timeout)
            try:
                next(iter(frames), None)
            finally:
                frames.cancel()
        else:
            channel.unary_unary(path)(body, timeout=timeout)
    except grpc.RpcError as exc:
        code: grpc.StatusCode = exc.code()
        return code
    return grpc.StatusCode.OK
