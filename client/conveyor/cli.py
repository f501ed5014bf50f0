"""``conveyor``: the operators' command line.

    conveyor [--server ADDR] pipelines
    conveyor [--server ADDR] describe NAME
    conveyor [--server ADDR] checkpoint NAME          # at the acknowledged position
    conveyor [--server ADDR] checkpoints NAME
    conveyor [--server ADDR] restore NAME --checkpoint ID
    conveyor [--server ADDR] stream NAME [--batches N]  # reads a copy, never moves NAME
    conveyor [--server ADDR] delete NAME [--keep-checkpoints] [--force]
    conveyor spec MODULE:FUNCTION [ARG ...] [--format json|textproto]   # no server
    conveyor tfrecord-index FILE [FILE ...] [--index-dir DIR] [--force]  # no server

``pipelines`` and ``describe`` say whether each holder is alive (its lease on the name in
Redis), how long a pipeline the answering server hosts has had no consumer (IDLE: its
server releases it after ``limits.idle_release_s``) and give the latest checkpoint
whichever server wrote it; ``describe`` prints the
spec one operator a line (an input ``#i.j`` is output j of operator #i); ``stream``
reports images/s and each output's dtype, layout and sample shapes. With no server at the
address, the error says how to name one (``--server``, ``CONVEYOR_SERVER``).
``tfrecord-index`` writes the DALI index file (``FILE.idx``, or in ``--index-dir``) of each
TFRecord file that has none, checking every record's checksums.

Credentials never go on the command line: the token is read from ``--token-file FILE``
(``-``: standard input) or ``CONVEYOR_TOKEN_FILE``, else ``CONVEYOR_TOKEN``. TLS:
``--tls-ca FILE`` (and ``--tls-cert`` / ``--tls-key`` for mTLS), or ``CONVEYOR_TLS_CA``,
``CONVEYOR_TLS_CERT``, ``CONVEYOR_TLS_KEY``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import secrets
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from google.protobuf import json_format, text_format

from conveyor.client import Client
from conveyor.definition.spec import as_spec
from conveyor.errors import ConveyorError, InvalidArgument, Unavailable
from conveyor.tensor_list import TensorList
from conveyor.transport.credentials import add_tls_arguments, tls_from_args
from conveyor.v1 import pipeline_pb2, service_pb2

DEFAULT_SERVER = "127.0.0.1:50051"
#: What gRPC says when nothing answers at an address (refused, unresolvable): the command
#: then says how to name the server.
_NO_SERVER_SIGNS = ("failed to connect to all addresses", "DNS resolution failed")
#: Items of a list argument shown before the rest are counted.
SHOWN_LIST_ITEMS = 4


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _print_table(rows: Sequence[Sequence[object]], header: Sequence[str]) -> None:
    cells = [list(map(str, header))] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _alive(info: service_pb2.PipelineInfo) -> str:
    """Whether the holder is alive, for the table: yes / no / ? (not known)."""
    if not info.HasField("holder_alive"):
        return "?"
    return "yes" if info.holder_alive else "no"


def _idle(info: service_pb2.PipelineInfo) -> str:
    """How long the pipeline has had no consumer, for the table: "-" while a stream is
    attached, or where its holder is another server (ask that one)."""
    if not info.HasField("idle_s"):
        return "-"
    seconds = info.idle_s
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _holder(info: service_pb2.PipelineInfo, known_as: Callable[[str], str]) -> str:
    """The holder line of ``describe``: who, and whether it is alive."""
    text = f"{known_as(info.holder)} (generation {info.generation})"
    if not info.HasField("holder_alive"):
        return f"{text}, alive: not known (the server could not read Redis)"
    if info.holder_alive:
        return f"{text}, alive (its lease on the name is current)"
    return f"{text}, NOT alive: its lease on the name ran out (the server is gone)"


def _dead_holder_hint(name: str, latest: str) -> str:
    checkpoint = latest or "ID"
    return (f"resume it on a live server with `conveyor restore {name} --checkpoint "
            f"{checkpoint}` (or a trainer's open of {name!r}), or release the name with "
            f"`conveyor delete {name} --force`")


def _argument(value: pipeline_pb2.Argument) -> str:
    """One constant argument as Python spells it; long lists shortened."""
    kind = value.WhichOneof("value")
    if kind is None:
        return "(unset)"
    if kind in ("ints", "floats", "strings"):
        items = list(getattr(value, kind).values)
        shown = ", ".join(repr(v) for v in items[:SHOWN_LIST_ITEMS])
        if len(items) > SHOWN_LIST_ITEMS:
            shown += f", ... ({len(items)} in all)"
        return f"[{shown}]"
    return repr(getattr(value, kind))


def _output(ref: pipeline_pb2.OutputRef) -> str:
    return f"#{ref.op}.{ref.output}"


def spec_lines(spec: pipeline_pb2.PipelineSpec) -> list[str]:
    """The spec as an operator reads it: its settings, then one operator a line (#index,
    type, name, device, inputs, per-sample argument inputs, constant arguments), then the
    outputs. An input ``#i.j`` is output j of operator #i."""
    lines = [f"batch size {spec.batch_size}, seed {spec.seed}, checkpointing "
             f"{'on' if spec.enable_checkpointing else 'off'}, threads {spec.num_threads}, "
             f"prefetch {spec.prefetch_queue_depth}, device "
             f"{spec.device_id if spec.device_id >= 0 else 'none'}"
             + (f", defined by {spec.definition}" if spec.definition else "")]
    for index, op in enumerate(spec.ops):
        parts = [f"#{index} {op.type}"]
        if op.name:
            parts.append(repr(op.name))
        parts.append(f"({op.device or 'cpu'})")
        if op.inputs:
            parts.append("<- " + ", ".join(_output(i) for i in op.inputs))
        parts += [f"{key}={_output(ref)}" for key, ref in sorted(op.arg_inputs.items())]
        parts += [f"{key}={_argument(arg)}" for key, arg in sorted(op.args.items())]
        lines.append("  ".join(parts))
    lines.append("outputs: " + ", ".join(_output(o) for o in spec.outputs))
    return lines


def _describe(info: service_pb2.PipelineInfo, client: Client) -> None:
    """``info`` as ``describe`` prints it; servers named as ``client`` knows them."""
    print(f"name:          {info.name}")
    print(f"holder:        {_holder(info, client.known_as)}")
    print(f"fingerprint:   {info.fingerprint}")
    if info.run_id:
        print(f"run:           {info.run_id}")
    if info.job.job:
        print(f"job:           {info.job.job}: rank {info.job.rank} of {info.job.world_size} "
              f"(generation {info.job.generation}), from step {info.job.step} at global "
              f"batch {info.job.global_batches}")
    if info.holder and info.spec.batch_size and not info.spec_checkpoint:
        print(f"batches:       produced {info.produced}, sent {info.sent}, "
              f"acknowledged {info.acknowledged}  (stream {'on' if info.streaming else 'off'})")
        if info.HasField("idle_s"):
            print(f"idle:          {_idle(info)} without a consumer (the server releases it "
                  "after limits.idle_release_s, keeping its checkpoints)")
        for reader, size in sorted(info.epoch_sizes.items()):
            print(f"epoch size:    {reader}: {size} samples")
        if info.samples_skipped or info.samples_replaced:
            print(f"failed samples: {info.samples_skipped} skipped, {info.samples_replaced} "
                  "replaced")
    elif info.holder and info.holder_alive:
        print(f"batches:       not known here (ask its holder: `conveyor --server "
              f"{client.reach(info.holder)} describe {info.name}`)")
    print(f"latest ckpt:   {info.latest_checkpoint or '-'}")
    if info.spec.batch_size:
        source = (f" (of its latest checkpoint, {info.spec_checkpoint})"
                  if info.spec_checkpoint else "")
        print(f"spec{source}:")
        for line in spec_lines(info.spec):
            print(f"  {line}")
    elif info.holder:
        print("spec:          not known here (it has no checkpoint this server can read)")
    if info.HasField("holder_alive") and not info.holder_alive:
        print(f"next:          {_dead_holder_hint(info.name, info.latest_checkpoint)}")


class _Outputs:
    """The dtypes, layouts and sample shapes seen on each output of a stream."""

    def __init__(self) -> None:
        self.kinds: list[tuple[str, str]] = []
        self.shapes: list[set[tuple[int, ...]]] = []

    def add(self, batch: Sequence[TensorList]) -> None:
        if not self.kinds:
            self.kinds = [(str(out.dtype), out.layout()) for out in batch]
            self.shapes = [set() for _ in batch]
        for seen, out in zip(self.shapes, batch, strict=True):
            seen.update(out.shape())

    def lines(self) -> list[str]:
        return [f"output {i}: {dtype}{f' {layout}' if layout else ''}, "
                f"{_shapes(shapes)}"
                for i, ((dtype, layout), shapes) in enumerate(zip(self.kinds, self.shapes,
                                                                  strict=True))]


def _shapes(shapes: set[tuple[int, ...]]) -> str:
    """A set of sample shapes in a few words: the one shape, or each dimension's range."""
    if len(shapes) == 1:
        return f"sample shape {next(iter(shapes))}"
    if len({len(s) for s in shapes}) != 1:
        return f"{len(shapes)} sample shapes of several ranks"
    dims = zip(*shapes, strict=True)
    ranges = [f"{min(d)}" if min(d) == max(d) else f"{min(d)}-{max(d)}" for d in dims]
    return f"sample shapes ({', '.join(ranges)}) ({len(shapes)} distinct)"


def _stream(client: Client, name: str, batches: int) -> None:
    checkpoints = client.checkpoints(name)
    source = checkpoints[-1].id if checkpoints else client.checkpoint(name).id
    copy_name = f"{name}-stream-{secrets.token_hex(3)}"
    pipe = client.restore(copy_name, checkpoint=source)
    tty = sys.stderr.isatty()
    start = time.perf_counter()
    total_bytes = samples = 0
    outputs = _Outputs()
    try:
        for i in range(1, batches + 1):
            batch = pipe.run_on()
            outputs.add(batch)
            samples += len(batch[0]) if batch else 0
            total_bytes += sum(sample.nbytes for out in batch for sample in out)
            elapsed = max(time.perf_counter() - start, 1e-9)
            line = (f"{i}/{batches} batches  {samples / elapsed:.1f} images/s  "
                    f"{i / elapsed:.1f} batches/s  {total_bytes / elapsed / 1e6:.1f} MB/s")
            if tty:
                done = int(30 * i / batches)
                print(f"\r[{'#' * done}{'.' * (30 - done)}] {line}", end="", file=sys.stderr)
        if tty:
            print(file=sys.stderr)
        elapsed = max(time.perf_counter() - start, 1e-9)
        print(f"read {batches} batches ({samples} samples) of {name} (copy {copy_name} from "
              f"{source}) in {elapsed:.2f}s: {samples / elapsed:.1f} images/s, "
              f"{batches / elapsed:.1f} batches/s, {total_bytes / elapsed / 1e6:.1f} MB/s")
        for text in outputs.lines():
            print(f"  {text}")
    finally:
        pipe.close()
        client.delete(copy_name)


def _positive(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _no_server_hint(exc: ConveyorError, address: str, from_env: bool,
                    given: bool) -> str:
    """What to do when no server answered at ``address`` ("" for any other error)."""
    if not isinstance(exc, Unavailable) or not any(sign in exc.message
                                                   for sign in _NO_SERVER_SIGNS):
        return ""
    where = ("given with --server" if given else "from CONVEYOR_SERVER" if from_env
             else "the default address")
    return (f"no Conveyor server answers at {address} ({where}): start one "
            f"(`conveyor-server --data-root DIR`), or name yours with --server HOST:PORT "
            "or the CONVEYOR_SERVER environment variable")


def _pipelines(infos: Sequence[service_pb2.PipelineInfo], client: Client) -> None:
    """The ``pipelines`` table; servers named as ``client`` knows them."""
    rows = [(i.name, client.known_as(i.holder), _alive(i), i.generation,
             i.acknowledged if i.spec.batch_size or i.sent else "-", _idle(i),
             i.latest_checkpoint or "-") for i in infos]
    _print_table(rows, ("NAME", "HOLDER", "ALIVE", "GEN", "ACKED", "IDLE",
                        "LATEST CHECKPOINT"))
    dead = [i for i in infos if i.HasField("holder_alive") and not i.holder_alive]
    if len(dead) == 1:
        print(f"\n{dead[0].name} is held by a server that is gone (its lease on the name "
              f"ran out): {_dead_holder_hint(dead[0].name, dead[0].latest_checkpoint)}")
    elif dead:
        print(f"\n{len(dead)} pipelines are held by servers that are gone (ALIVE no: their "
              f"leases ran out): for each, {_dead_holder_hint('NAME', '')}")


def _export_spec(target: str, arguments: Sequence[str], fmt: str) -> None:
    """Print the spec a definition returns, for a server's configuration file."""
    module_name, _, function_name = target.partition(":")
    if not module_name or not function_name:
        raise InvalidArgument(f"expected MODULE:FUNCTION, got {target!r}")
    sys.path.insert(0, os.getcwd())
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise InvalidArgument(f"cannot load {target}: {exc}") from None
    try:
        definition = function(*arguments)
    except ConveyorError:
        raise
    except Exception as exc:
        raise InvalidArgument(f"{target}{tuple(arguments)!r} failed: "
                              f"{type(exc).__name__}: {exc}") from None
    try:
        spec = as_spec(definition)
    except InvalidArgument:
        raise InvalidArgument(f"{target} returned {type(definition).__name__}, not a pipeline "
                              "spec (decorate it with @pipeline_def)") from None
    print(json_format.MessageToJson(spec) if fmt == "json"
          else text_format.MessageToString(spec), end="" if fmt == "textproto" else "\n")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="conveyor", description="Operate Conveyor pipelines.")
    p.add_argument("--server", default=None,
                   help=f"server address (env CONVEYOR_SERVER; default {DEFAULT_SERVER})")
    p.add_argument("--timeout", type=float, default=30.0, help="deadline of each call (s)")
    p.add_argument("--token-file", metavar="FILE",
                   help="file holding the bearer token, '-' for standard input (env "
                        "CONVEYOR_TOKEN_FILE; else CONVEYOR_TOKEN)")
    add_tls_arguments(p)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("pipelines", help="list pipelines, their holders and whether each "
                                     "holder is alive")
    for cmd, text in (("describe", "show one pipeline"),
                      ("checkpoint", "checkpoint at the acknowledged position"),
                      ("checkpoints", "list retained checkpoints")):
        sub.add_parser(cmd, help=text).add_argument("name")
    r = sub.add_parser("restore", help="restore a pipeline from a checkpoint, on a lightly "
                                            "loaded server of the fleet")
    r.add_argument("name")
    r.add_argument("--checkpoint", required=True,
                   help="checkpoint id, e.g. rotate:12-9f3c0a1b2c3d4e5f")
    r.add_argument("--consumed", type=int, default=None,
                   help="batches the trainer consumed, at or after the checkpoint: the "
                        "pipeline resumes after them")
    s = sub.add_parser("stream", help="read batches from a copy (never moves the trainer)")
    s.add_argument("name")
    s.add_argument("--batches", type=_positive, default=100, metavar="N",
                   help="batches to read (at least 1; default 100)")
    e = sub.add_parser("spec", help="print the spec a definition returns (no server needed), "
                                    "for the server's configuration: pipelines[].spec_file")
    e.add_argument("target", metavar="MODULE:FUNCTION")
    e.add_argument("arguments", nargs="*", help="string arguments of the function")
    e.add_argument("--format", choices=("json", "textproto"), default="json")
    t = sub.add_parser("tfrecord-index", help="write the index files fn.readers.tfrecord "
                                              "reads (no server needed)")
    t.add_argument("files", nargs="+", metavar="FILE", help="TFRecord files")
    t.add_argument("--index-dir", metavar="DIR",
                   help="where to write FILE.idx (default: beside each file)")
    t.add_argument("--force", action="store_true", help="rewrite index files that exist")
    d = sub.add_parser("delete", help="delete a pipeline and release its name")
    d.add_argument("name")
    d.add_argument("--keep-checkpoints", action="store_true")
    d.add_argument("--force", action="store_true",
                   help="release the name on any server, whoever holds it (a dead server)")
    args = p.parse_args(argv)
    if args.command == "tfrecord-index":
        from conveyor.definition import tfrecord
        return tfrecord.index_command(args.files, args.index_dir, args.force)
    if args.command == "spec":
        try:
            _export_spec(args.target, args.arguments, args.format)
        except ConveyorError as exc:
            print(f"conveyor: {exc.code}: {exc.message}", file=sys.stderr)
            return 1
        return 0
    from_env = "CONVEYOR_SERVER" in os.environ
    server = args.server or os.environ.get("CONVEYOR_SERVER") or DEFAULT_SERVER
    try:
        with Client(server, timeout=args.timeout, token_file=args.token_file,
                    tls=tls_from_args(args)) as client:
            if args.command == "pipelines":
                _pipelines(client.pipelines(), client)
            elif args.command == "describe":
                _describe(client.pipeline(args.name), client)
            elif args.command == "checkpoint":
                c = client.checkpoint(args.name)
                print(f"{c.id}  after batch {c.batches}  {len(c.data)} bytes  by "
                      f"{client.known_as(c.server)}")
            elif args.command == "checkpoints":
                _print_table([(c.id, c.batches, c.size_bytes, client.known_as(c.server),
                               _when(c.created_unix_ms)) for c in client.checkpoints(args.name)],
                             ("ID", "BATCHES", "BYTES", "SERVER", "CREATED (UTC)"))
            elif args.command == "restore":
                pipe = client.restore(args.name, checkpoint=args.checkpoint,
                                      consumed=args.consumed)
                print(f"restored {pipe.name} on {client.known_as(pipe.via)} at batch "
                      f"{pipe.info.acknowledged} (generation {pipe.info.generation})")
            elif args.command == "stream":
                _stream(client, args.name, args.batches)
            elif args.command == "delete":
                client.delete(args.name, keep_checkpoints=args.keep_checkpoints,
                              force=args.force)
                print(f"deleted {args.name}")
    except ConveyorError as exc:
        print(f"conveyor: {exc.code}: {exc.message}", file=sys.stderr)
        hint = _no_server_hint(exc, server, from_env, args.server is not None)
        if hint:
            print(f"conveyor: {hint}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
