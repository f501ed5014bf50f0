"""Turn a validated ``PipelineSpec`` into an executable plan.

Readers and random operators become source stages (stateful, run once per batch on the
submitting thread); every other operator becomes a step, in spec order (which is
topological). Consecutive per-sample steps form one ``SampleSegment``, run for one sample
at a time on the worker threads; a per-batch step is a ``BatchSegment`` of its own, run
once per batch at a barrier. The first segment is always per sample: it reads each
sample's file. Where an operator is registered in both forms, ``batch_ops`` picks the
batched one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from conveyor.definition.schemas import registry as schema
from conveyor.errors import DeviceUnavailable, SpecError
from conveyor.v1 import checkpoint_pb2, pipeline_pb2
from conveyor_server.engine import catalog
from conveyor_server.engine.admission.limits import NO_LIMITS, EngineLimits
from conveyor_server.engine.admission.spec_bounds import check_spec
from conveyor_server.engine.data import file_list
from conveyor_server.engine.data.files import DataFiles
from conveyor_server.engine.data.identity import DataIdentity
from conveyor_server.engine.data.object_store import ObjectStores
from conveyor_server.engine.data.roots import DataRoots
from conveyor_server.engine.ops import registry
from conveyor_server.engine.ops.registry import BATCH, SAMPLE, BatchOp, BuiltOp, OpContext
from conveyor_server.engine.readers.build import (
    READERS,
    ReaderRequest,
    SampleSource,
    build_reader,
)
from conveyor_server.engine.readers.identity import ReaderIdentity
from conveyor_server.engine.stages import SourceStage
from conveyor_server.engine.stages.external_source import OP as EXTERNAL_SOURCE
from conveyor_server.engine.stages.external_source import ExternalSourceStage, make_pool
from conveyor_server.engine.stages.file_reader import FileReaderStage
from conveyor_server.engine.stages.random_ops import DRAWS, RandomStage
from conveyor_server.engine.stages.source_callables import IN_PROCESS, ExternalSources
from conveyor_server.engine.stages.source_pool import SourcePool

# Every operator, reader and GPU planner registers itself as its module is imported.
catalog.load()

Ref = tuple[int, int]
#: Where a sample holds its global index, for operators whose draws are keyed by it.
SAMPLE_INDEX_REF: Ref = (-1, 0)


@dataclass
class ReaderBinding:
    stage: FileReaderStage
    entries: list[file_list.FileEntry]
    name: str
    digest: checkpoint_pb2.FileListDigest
    identity: DataIdentity | ReaderIdentity
    #: How its files are opened (beneath their data roots, bounded) and named.
    files: DataFiles
    on_error: str = "fail"
    #: Reads a sample's outputs by index (``engine/readers/``); None for ``readers.file``,
    #: whose samples are its entries' bytes and labels.
    source: SampleSource | None = None
    #: Whether it reads objects in object storage (``readers.file``'s entries, or what its
    #: source reads), fetched ahead as a batch starts; decided once, at build.
    reads_objects: bool = False


@dataclass
class Step:
    op_index: int
    op_type: str
    op: BuiltOp
    inputs: list[Ref]
    arg_inputs: dict[str, Ref]
    num_outputs: int
    #: What a sample this step fails on becomes: "fail", "skip" or "replace".
    on_error: str = "fail"

    @property
    def label(self) -> str:
        return f"{self.op_type} (op {self.op_index})"


@dataclass
class SampleSegment:
    """Per-sample steps run one after another for each sample, on the worker threads."""

    steps: list[Step]


@dataclass
class BatchSegment:
    """One per-batch step, run once per batch after the segments before it."""

    step: Step


Segment = SampleSegment | BatchSegment


@dataclass
class Plan:
    spec: pipeline_pb2.PipelineSpec
    stages: list[SourceStage]
    readers: dict[int, ReaderBinding]
    randoms: dict[int, RandomStage]
    segments: list[Segment]
    layouts: dict[Ref, str]
    outputs: list[Ref]
    #: The external sources by op index (their values are computed on the submitting thread).
    sources: dict[int, ExternalSourceStage] = field(default_factory=dict)
    #: The worker processes of the parallel external sources (``parallel=True``), if any:
    #: started by the pipeline, closed with it.
    source_pool: SourcePool | None = None
    #: For each segment, the values still needed once it has run (by later segments or as
    #: outputs): a sample keeps only these, so a prefetched batch holds no intermediates.
    live_after: list[frozenset[Ref]] = field(default_factory=list)

    def describe(self) -> list[str]:
        """One line per segment: ``per sample: decoders.image@cpu, rotate@cpu``."""
        lines = []
        for segment in self.segments:
            steps = segment.steps if isinstance(segment, SampleSegment) else [segment.step]
            kind = "per sample" if isinstance(segment, SampleSegment) else "per batch"
            names = ", ".join(f"{s.op_type}@{s.op.device}" for s in steps) or "(read only)"
            lines.append(f"{kind}: {names}")
        return lines

    def _find_live(self) -> None:
        live = set(self.outputs)
        after: list[frozenset[Ref]] = []
        for segment in reversed(self.segments):
            after.append(frozenset(live))
            steps = segment.steps if isinstance(segment, SampleSegment) else [segment.step]
            for step in steps:
                live.update(step.inputs)
                live.update(step.arg_inputs.values())
        self.live_after = after[::-1]

    def _add(self, step: Step) -> None:
        if isinstance(step.op, BatchOp):
            self.segments.append(BatchSegment(step))
            return
        last = self.segments[-1]
        if isinstance(last, SampleSegment):
            last.steps.append(step)
        else:
            self.segments.append(SampleSegment([step]))

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


def _form(op_type: str, batch_ops: bool, device: str = "cpu") -> registry.Per:
    forms = registry.forms(op_type, device)
    if not forms:
        if registry.forms(op_type):
            raise DeviceUnavailable(f"{op_type}: device={device!r} is not implemented on this "
                                    "server (use device='cpu')")
        raise KeyError(f"no operator {op_type!r} is registered")
    return BATCH if BATCH in forms and (batch_ops or SAMPLE not in forms) else SAMPLE


def check_devices(spec: pipeline_pb2.PipelineSpec) -> None:
    """Refuse a CPU operator fed by a GPU one (its data is in device memory), as DALI does:
    data goes from the CPU to the GPU ("mixed" decoders, "gpu" operators), not back."""
    for op in spec.ops:
        if op.device not in ("", "cpu"):
            continue
        fed = [(f"input {k}", r) for k, r in enumerate(op.inputs)]
        fed += [(f"argument {name!r}", r) for name, r in sorted(op.arg_inputs.items())]
        for what, ref in fed:
            source = spec.ops[ref.op] if ref.op < len(spec.ops) else None
            if source is not None and source.device not in ("", "cpu"):
                raise SpecError(op.type, "device", f"its {what} comes from {source.type} (op "
                                f"{ref.op}) on device={source.device!r}: a CPU operator cannot "
                                "take GPU data; run it on device='gpu'")


def build_plan(spec: pipeline_pb2.PipelineSpec,
               data_roots: Sequence[str | Path] | None = None,
               limits: EngineLimits = NO_LIMITS, *, batch_ops: bool = True,
               sources: ExternalSources = IN_PROCESS,
               objects: ObjectStores | None = None) -> Plan:
    """``sources``: the callables an ``external_source`` may name (a server's configured
    ones; by default, in process, any). ``objects``: the clients of object storage (a
    server's, shared by its pipelines; by default configured by the environment)."""
    check_spec(spec, limits)
    check_devices(spec)
    plan = Plan(spec, [], {}, {}, [SampleSegment([])], {}, [_ref(r) for r in spec.outputs])
    batch = spec.batch_size
    roots = DataRoots(data_roots) if data_roots is not None else None  # resolved once
    files = DataFiles(roots, limits, objects)
    for index, op in enumerate(spec.ops):
        args = schema.decode_args(op)
        if op.type in READERS:
            parts = build_reader(ReaderRequest(op.type, index, args, batch,
                                               _seed(args, spec.seed), roots, limits, files))
            digest = checkpoint_pb2.FileListDigest(
                op=index, reader_name=op.name, num_files=parts.count,
                sha256=parts.identity.digest)
            entries = list(parts.entries)
            plan.readers[index] = ReaderBinding(
                parts.stage, entries, op.name, digest, parts.identity, files,
                args["on_error"], parts.source, parts.reads_objects)
            plan.stages.append(parts.stage)
            for out in range(op.num_outputs):
                plan.layouts[(index, out)] = ""
        elif op.type == EXTERNAL_SOURCE:
            name = args["source"]
            source = ExternalSourceStage(index, name, sources.resolve(name, index), args,
                                         batch_size=batch)
            plan.sources[index] = source
            plan.stages.append(source)
            for out, layout in enumerate(source.layouts):
                plan.layouts[(index, out)] = layout
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
                limits=limits, seed=_seed(args, spec.seed), device_id=spec.device_id,
                batch_size=batch, callables=sources.resolve,
            )
            built = registry.build(ctx, _form(op.type, batch_ops, op.device))
            arg_refs = {k: _ref(v) for k, v in op.arg_inputs.items()}
            if built.keyed:
                arg_refs[registry.SAMPLE_INDEX] = SAMPLE_INDEX_REF
            plan._add(Step(index, op.type, built, [_ref(r) for r in op.inputs], arg_refs,
                           op.num_outputs, args.get("on_error", "fail")))
            for out, layout in enumerate(built.layouts):
                plan.layouts[(index, out)] = layout
    parallel = [stage for stage in plan.sources.values() if stage.wants_parallel]
    if parallel:
        plan.source_pool = make_pool(spec, parallel, sources)
    plan._find_live()
    return plan
