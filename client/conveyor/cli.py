"""``conveyor``: the operators' command line.

    conveyor [--server ADDR] pipelines
    conveyor [--server ADDR] describe NAME
    conveyor [--server ADDR] checkpoint NAME          # at the acknowledged position
    conveyor [--server ADDR] checkpoints NAME
    conveyor [--server ADDR] restore NAME --checkpoint ID
    conveyor [--server ADDR] stream NAME --batches N  # reads a copy, never moves NAME
    conveyor [--server ADDR] delete NAME [--keep-checkpoints]
    conveyor spec MODULE:FUNCTION [ARG ...] [--format json|textproto]   # no server

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
from collections.abc import Sequence
from datetime import UTC, datetime

from google.protobuf import json_format, text_format

from conveyor.client import Client
from conveyor.credentials import add_tls_arguments, tls_from_args
from conveyor.errors import ConveyorError, InvalidArgument
from conveyor.v1 import pipeline_pb2, service_pb2


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _print_table(rows: Sequence[Sequence[object]], header: Sequence[str]) -> None:
    cells = [list(map(str, header))] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _describe(info: service_pb2.PipelineInfo) -> None:
    print(f"name:          {info.name}")
    print(f"holder:        {info.holder} (generation {info.generation})")
    print(f"fingerprint:   {info.fingerprint}")
    if info.run_id:
        print(f"run:           {info.run_id}")
    if info.job.job:
        print(f"job:           {info.job.job}: rank {info.job.rank} of {info.job.world_size} "
              f"(generation {info.job.generation}), from step {info.job.step} at global "
              f"batch {info.job.global_batches}")
    if info.holder and info.spec.batch_size:
        print(f"batch size:    {info.spec.batch_size}  seed: {info.spec.seed}  "
              f"checkpointing: {'on' if info.spec.enable_checkpointing else 'off'}")
        print(f"batches:       produced {info.produced}, sent {info.sent}, "
              f"acknowledged {info.acknowledged}  (stream {'on' if info.streaming else 'off'})")
        for reader, size in sorted(info.epoch_sizes.items()):
            print(f"epoch size:    {reader}: {size} samples")
        if info.samples_skipped or info.samples_replaced:
            print(f"failed samples: {info.samples_skipped} skipped, {info.samples_replaced} "
                  "replaced")
    print(f"latest ckpt:   {info.latest_checkpoint or '-'}")


def _stream(client: Client, name: str, batches: int) -> None:
    checkpoints = client.checkpoints(name)
    source = checkpoints[-1].id if checkpoints else client.checkpoint(name).id
    copy_name = f"{name}-stream-{secrets.token_hex(3)}"
    pipe = client.restore(copy_name, checkpoint=source)
    tty = sys.stderr.isatty()
    start = time.perf_counter()
    total_bytes = 0
    try:
        for i in range(1, batches + 1):
            batch = pipe.run()
            total_bytes += sum(sample.nbytes for out in batch for sample in out)
            elapsed = max(time.perf_counter() - start, 1e-9)
            line = (f"{i}/{batches} batches  {i / elapsed:.1f} batches/s  "
                    f"{total_bytes / elapsed / 1e6:.1f} MB/s")
            if tty:
                done = int(30 * i / batches)
                print(f"\r[{'#' * done}{'.' * (30 - done)}] {line}", end="", file=sys.stderr)
        if tty:
            print(file=sys.stderr)
        elapsed = max(time.perf_counter() - start, 1e-9)
        print(f"read {batches} batches of {name} (copy {copy_name} from {source}) in "
              f"{elapsed:.2f}s: {batches / elapsed:.1f} batches/s, "
              f"{total_bytes / elapsed / 1e6:.1f} MB/s")
    finally:
        pipe.close()
        client.delete(copy_name)


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
        spec = function(*arguments)
    except ConveyorError:
        raise
    except Exception as exc:
        raise InvalidArgument(f"{target}{tuple(arguments)!r} failed: "
                              f"{type(exc).__name__}: {exc}") from None
    if not isinstance(spec, pipeline_pb2.PipelineSpec):
        raise InvalidArgument(f"{target} returned {type(spec).__name__}, not a pipeline spec "
                              "(decorate it with @pipeline_def)")
    print(json_format.MessageToJson(spec) if fmt == "json"
          else text_format.MessageToString(spec), end="" if fmt == "textproto" else "\n")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="conveyor", description="Operate Conveyor pipelines.")
    p.add_argument("--server", default=os.environ.get("CONVEYOR_SERVER", "127.0.0.1:50051"),
                   help="server address (env CONVEYOR_SERVER; default 127.0.0.1:50051)")
    p.add_argument("--timeout", type=float, default=30.0, help="deadline of each call (s)")
    p.add_argument("--token-file", metavar="FILE",
                   help="file holding the bearer token, '-' for standard input (env "
                        "CONVEYOR_TOKEN_FILE; else CONVEYOR_TOKEN)")
    add_tls_arguments(p)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("pipelines", help="list pipelines and their holders")
    for cmd, text in (("describe", "show one pipeline"),
                      ("checkpoint", "checkpoint at the acknowledged position"),
                      ("checkpoints", "list retained checkpoints")):
        sub.add_parser(cmd, help=text).add_argument("name")
    r = sub.add_parser("restore", help="restore a pipeline on this server from a checkpoint")
    r.add_argument("name")
    r.add_argument("--checkpoint", required=True,
                   help="checkpoint id, e.g. rotate:12-9f3c0a1b2c3d4e5f")
    r.add_argument("--consumed", type=int, default=None,
                   help="batches the trainer consumed, at or after the checkpoint: the "
                        "pipeline resumes after them")
    s = sub.add_parser("stream", help="read batches from a copy (never moves the trainer)")
    s.add_argument("name")
    s.add_argument("--batches", type=int, default=100)
    e = sub.add_parser("spec", help="print the spec a definition returns (no server needed), "
                                    "for the server's configuration: pipelines[].spec_file")
    e.add_argument("target", metavar="MODULE:FUNCTION")
    e.add_argument("arguments", nargs="*", help="string arguments of the function")
    e.add_argument("--format", choices=("json", "textproto"), default="json")
    d = sub.add_parser("delete", help="delete a pipeline and release its name")
    d.add_argument("name")
    d.add_argument("--keep-checkpoints", action="store_true")
    d.add_argument("--force", action="store_true",
                   help="release the name on any server, whoever holds it (a dead server)")
    args = p.parse_args(argv)
    if args.command == "spec":
        try:
            _export_spec(args.target, args.arguments, args.format)
        except ConveyorError as exc:
            print(f"conveyor: {exc.code}: {exc.message}", file=sys.stderr)
            return 1
        return 0
    try:
        with Client(args.server, timeout=args.timeout, token_file=args.token_file,
                    tls=tls_from_args(args)) as client:
            if args.command == "pipelines":
                rows = [(i.name, i.holder, i.generation, i.acknowledged if i.spec.batch_size
                         or i.sent else "-", i.latest_checkpoint or "-")
                        for i in client.pipelines()]
                _print_table(rows, ("NAME", "HOLDER", "GEN", "ACKED", "LATEST CHECKPOINT"))
            elif args.command == "describe":
                _describe(client.pipeline(args.name))
            elif args.command == "checkpoint":
                c = client.checkpoint(args.name)
                print(f"{c.id}  after batch {c.batches}  {len(c.data)} bytes  by {c.server}")
            elif args.command == "checkpoints":
                _print_table([(c.id, c.batches, c.size_bytes, c.server,
                               _when(c.created_unix_ms)) for c in client.checkpoints(args.name)],
                             ("ID", "BATCHES", "BYTES", "SERVER", "CREATED (UTC)"))
            elif args.command == "restore":
                pipe = client.restore(args.name, checkpoint=args.checkpoint,
                                      consumed=args.consumed)
                print(f"restored {pipe.name} on {pipe.info.holder} at batch "
                      f"{pipe.info.acknowledged} (generation {pipe.info.generation})")
            elif args.command == "stream":
                _stream(client, args.name, args.batches)
            elif args.command == "delete":
                client.delete(args.name, keep_checkpoints=args.keep_checkpoints,
                              force=args.force)
                print(f"deleted {args.name}")
    except ConveyorError as exc:
        print(f"conveyor: {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
