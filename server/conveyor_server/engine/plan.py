"""Turn a validated ``PipelineSpec`` into an executable plan.

Readers and random operators become source stages (stateful, run once per batch on the
submitting thread); every other operator becomes a per-sample step, run for one sample at a
time on a worker thread. A sample's steps run in spec order, which is topological.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from conveyor import schema
from conveyor.errors import SpecError
from conveyor.spec import validate_spec
from conveyor.v1 import checkpoint_pb2, pipeline_pb2
from conveyor_server.engine import file_list
from conveyor_server.engine.limits import NO_LIMITS, EngineLimits
from conveyor_server.engine.ops.registry import OpContext, SampleFn, builder_for
from conveyor_server.engine.stages import SourceStage
from conveyor_server.engine.stages.file_reader import FileReaderStage
from conveyor_server.engine.stages.random_ops import DRAWS, RandomStage

Ref = tuple[int, int]


@dataclass
class ReaderBinding:
    stage: FileReaderStage
    entries: list[file_list.FileEntry]
    name: str
    digest: checkpoint_pb2.FileListDigest


@dataclass
class SampleStep:
    op_index: int
    op_type: str
    fn: SampleFn
    inputs: list[Ref]
    arg_inputs: dict[str, Ref]
    num_outputs: int


@dataclass
class Plan:
    spec: pipeline_pb2.PipelineSpec
    stages: list[SourceStage]
    readers: dict[int, ReaderBinding]
    randoms: dict[int, RandomStage]
    steps: list[SampleStep]
    layouts: dict[Ref, str]
    outputs: list[Ref]

    def reader(self, name: str | None) -> ReaderBinding:
        if name is None:
            if len(self.readers) != 1:
                raise SpecError("pipeline", "name", f"has {len(self.readers)} readers: name one")
            return next(iter(self.readers.values()))
        for binding in self.readers.values():
            if binding.name == name:
                return binding
        names = sorted(b.name for b in self.readers.values() if b.name)
        raise SpecError("pipeline", "name", f"no reader named {name!r} (readers: {names})")


def _ref(r: pipeline_pb2.OutputRef) -> Ref:
    return (r.op, r.output)


def _seed(args: dict[str, object], pipeline_seed: int) -> int:
    seed = args.get("seed", -1)
    return pipeline_seed if not isinstance(seed, int) or seed < 0 else seed


def build_plan(spec: pipeline_pb2.PipelineSpec, data_roots: Sequence[Path] | None = None,
               limits: EngineLimits = NO_LIMITS) -> Plan:
    validate_spec(spec)
    plan = Plan(spec, [], {}, {}, [], {}, [_ref(r) for r in spec.outputs])
    batch = spec.batch_size
    for index, op in enumerate(spec.ops):
        args = schema.decode_args(op)
        if op.type == "readers.file":
            entries = file_list.resolve(args, data_roots)
            reader = FileReaderStage(
                index, len(entries), batch_size=batch, seed=_seed(args, spec.seed),
                num_shards=args["num_shards"], shard_id=args["shard_id"],
                stick_to_shard=args["stick_to_shard"], pad_last_batch=args["pad_last_batch"],
                random_shuffle=args["random_shuffle"],
                shuffle_after_epoch=args["shuffle_after_epoch"],
                shuffle_after_epoch_seed=args["shuffle_after_epoch_seed"],
            )
            digest = checkpoint_pb2.FileListDigest(
                op=index, reader_name=op.name, num_files=len(entries),
                sha256=file_list.digest(entries))
            plan.readers[index] = ReaderBinding(reader, entries, op.name, digest)
            plan.stages.append(reader)
            plan.layouts[(index, 0)] = plan.layouts[(index, 1)] = ""
        elif op.type in DRAWS:
            stage = RandomStage(op.type, index, args, batch_size=batch,
                                seed=_seed(args, spec.seed))
            plan.randoms[index] = stage
            plan.stages.append(stage)
            plan.layouts[(index, 0)] = ""
        else:
            ctx = OpContext(
                op_type=op.type, index=index, args=args,
                tensor_args=frozenset(op.arg_inputs), device=op.device,
                input_layouts=tuple(plan.layouts.get(_ref(r), "") for r in op.inputs),
                limits=limits,
            )
            built = builder_for(op.type)(ctx)
            plan.steps.append(SampleStep(
                index, op.type, built.fn, [_ref(r) for r in op.inputs],
                {k: _ref(v) for k, v in op.arg_inputs.items()}, op.num_outputs))
            for out, layout in enumerate(built.layouts):
                plan.layouts[(index, out)] = layout
    return plan
