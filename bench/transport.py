"""Transport: batches of 150 KB, 1 MiB and 8 MiB from a server process to this one.

- conveyor stream: the real path, a conveyor-server streaming a pipeline whose only output
  is one file's bytes (``fn.readers.file`` with batch size 1, the file in page cache), read
  with ``conveyor.Client`` (frames of 1 MiB, one copy into the batch buffer)
- conveyor wire format: the same grpcio server process encoding a prebuilt batch with
  ``conveyor.transport.wire.encode_frames`` for every batch, received with ``BatchAssembler``: the
  cost of the stream format alone, without the engine and the acknowledgements
- bare grpcio: a grpcio server process streaming prebuilt ``bytes`` messages of the same
  frame size (no protobuf, no assembly): what gRPC itself costs

Every process here runs with the glibc malloc settings conveyor-server and the client use
(``conveyor.transport.allocator``): without them, the receiving side of every gRPC contender faults
in each megabyte afresh, and the comparison would measure the allocator.
- raw TCP: a plain socket sender process and receiver (``recv_into`` one buffer): the
  ceiling on loopback

Run: python -m bench.transport [--quick]
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import numpy as np

import conveyor
from bench._shared import Server, interleaved, machine, median, parse_args, ratio, spread, table
from conveyor import fn, pipeline_def
from conveyor.tensor_list import TensorList
from conveyor.transport.allocator import DEFAULT, tune_malloc
from conveyor.transport.wire import BatchAssembler, encode_frames

SIZES = {"150 KB": 150_000, "1 MiB": 1 << 20, "8 MiB": 8 << 20}
FRAME = 1 << 20
METHOD = "/bench.Bare/Stream"


def _bare_server(size: int, wire: bool) -> None:
    """Child process: a grpcio server streaming one batch forever, as prebuilt frames or
    encoded afresh by Conveyor's wire format for every batch."""
    tune_malloc(DEFAULT)
    payload = os.urandom(size)
    frames = [payload[i:i + FRAME] for i in range(0, size, FRAME)]
    batch = (TensorList([np.frombuffer(payload, dtype=np.uint8).copy()]),)

    def stream(request: bytes, context: grpc.ServicerContext) -> Any:
        for index in itertools.count():
            if not context.is_active():
                return
            yield from (encode_frames(index, batch) if wire else frames)

    server = grpc.server(futures.ThreadPoolExecutor(4))
    handler = grpc.method_handlers_generic_handler("bench.Bare", {
        "Stream": grpc.unary_stream_rpc_method_handler(stream)})
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


def _tcp_sender(size: int) -> None:
    """Child process: accept one connection and send the batch bytes forever."""
    payload = os.urandom(size)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        print(listener.getsockname()[1], flush=True)
        conn, _ = listener.accept()
        with conn:
            try:
                while True:
                    conn.sendall(payload)
            except OSError:
                return


def _child(role: str, size: int) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, "-m", "bench.transport", "--child", role, str(size)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def bare_grpc(port: int, size: int, batches: int) -> Callable[[], float]:
    def run() -> float:
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=[
                ("grpc.max_receive_message_length", 64 << 20)]) as channel:
            call = channel.unary_stream(METHOD)(b"")
            received, warm, start = 0, size * 2, 0.0
            for frame in call:
                received += len(frame)
                if not start and received >= warm:
                    start, received = time.perf_counter(), 0
                if start and received >= size * batches:
                    break
            seconds = time.perf_counter() - start
            call.cancel()
            return received / seconds / 1e9
    return run


def wire_format(port: int, size: int, batches: int) -> Callable[[], float]:
    def run() -> float:
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=[
                ("grpc.max_receive_message_length", 64 << 20)]) as channel:
            call = channel.unary_stream(METHOD)(b"")
            assembler = BatchAssembler()
            done, start = 0, 0.0
            for frame in call:
                if assembler.feed(frame) is None:
                    continue
                done += 1
                if done == 2:
                    start = time.perf_counter()
                if done == batches + 2:
                    break
            seconds = time.perf_counter() - start
            call.cancel()
            return size * batches / seconds / 1e9
    return run


def raw_tcp(size: int, batches: int) -> Callable[[], float]:
    def run() -> float:
        proc, port = _child("tcp", size)
        try:
            buffer = bytearray(size)
            view = memoryview(buffer)
            with socket.create_connection(("127.0.0.1", port)) as conn:
                def batch() -> None:
                    got = 0
                    while got < size:
                        got += conn.recv_into(view[got:])
                batch()
                start = time.perf_counter()
                for _ in range(batches):
                    batch()
                return size * batches / (time.perf_counter() - start) / 1e9
        finally:
            proc.kill()
            proc.wait()
            if proc.stdout:
                proc.stdout.close()
    return run


def conveyor_stream(server: Server, root: Path, size: int, batches: int) -> Callable[[], float]:
    names = itertools.count()

    @pipeline_def(batch_size=1, num_threads=1, seed=1, enable_checkpointing=True)
    def blob_pipeline() -> Any:
        data, _ = fn.readers.file(file_root=str(root), file_filters=["*.bin"])
        return data

    def run() -> float:
        with conveyor.Client(server.address, timeout=60) as client:
            name = f"t{size}-{next(names)}"
            pipe = client.create(name, blob_pipeline())
            try:
                for _ in range(2):
                    pipe.run()
                start = time.perf_counter()
                for _ in range(batches):
                    pipe.run()
                return size * batches / (time.perf_counter() - start) / 1e9
            finally:
                pipe.close()
                client.delete(name)
    return run


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        role, size = sys.argv[2], int(sys.argv[3])
        if role == "tcp":
            _tcp_sender(size)
        else:
            _bare_server(size, wire=role == "wire")
        return
    args = parse_args(__doc__.splitlines()[0])
    tune_malloc(DEFAULT)
    total = (64 << 20) if args.quick else (512 << 20)
    print(f"# Transport on loopback ({machine()})\n# GB/s of batch payload, median of "
          f"{args.runs} interleaved runs (min-max); ratios: median of per-run ratios "
          "(min-max)\n")
    rows, ratios = [], []
    base = args.data.parent / "conveyor-bench-blobs"
    for label, size in SIZES.items():
        root = base / f"{size}"
        (root / "blob").mkdir(parents=True, exist_ok=True)
        (root / "blob" / "batch.bin").write_bytes(os.urandom(size))
        batches = max(4, total // size)
        grpc_proc, grpc_port = _child("grpc", size)
        wire_proc, wire_port = _child("wire", size)
        try:
            with Server(root) as server:
                results = interleaved({
                    "conveyor stream": conveyor_stream(server, root, size, batches),
                    "conveyor wire format": wire_format(wire_port, size, batches),
                    "bare grpcio": bare_grpc(grpc_port, size, batches),
                    "raw TCP": raw_tcp(size, batches),
                }, args.runs)
        finally:
            for proc in (grpc_proc, wire_proc):
                proc.kill()
                proc.wait()
                if proc.stdout:
                    proc.stdout.close()
        for name, values in results.items():
            rows.append((label, name, f"{median(values):.2f}", spread(values, "{:.2f}")))
        ours, bare = results["conveyor stream"], results["bare grpcio"]
        ratios.append((label, ratio(ours, bare), ratio(results["conveyor wire format"], bare),
                       ratio(ours, results["raw TCP"])))
    table(rows, ("batch", "transport", "GB/s", "spread"))
    table(ratios, ("batch", "stream / bare grpcio", "wire format / bare grpcio",
                   "stream / raw TCP"))


if __name__ == "__main__":
    main()
