"""A trainer process for ``tests/client/remote/test_client_close.py``: takes batches from a
real server, says so, waits for the test to do something to the server (drain it, stop it,
kill it, stop Redis), then ends its use of the client one way or another and exits.

``python -m tests.support.close_child WAY IMAGE_DIR``; it imports what WAY uses (torch, gRPC),
then reads the servers (``host:port,...``) from its first line of stdin: the test starts the
server while the trainer imports. It prints ``took N`` once it holds its batches, reads
another line from stdin (the test's "go on"), ends its use of the client, prints ``ended``
and returns from ``main`` (the interpreter then exits, running whatever finalisers are
left).

WAY, how the client's use ends:

- ``loader-exit``: a torchdata ``StatefulDataLoader`` over ``conveyor.torch.ConveyorDataset``
  whose iterator is still suspended when the script ends (the generator's finaliser runs
  at interpreter exit);
- ``loader-exit-held``: the same, and from the last ``atexit`` hook on a thread holds the
  lock of the stream's gRPC call and never lets go: as a gRPC thread does that the
  interpreter's exit stopped while it held that lock (after the ``atexit`` hooks Python
  stops every daemon thread where it stands). Nothing may take that lock after them;
- ``loader-del``: the same, the loader's iterator dropped (``del``, then ``gc.collect``);
- ``generator-exit``: the dataset's own generator (no loader) still suspended when the
  script ends;
- ``dataset-close``: the dataset's own generator closed (``generator.close()``);
- ``client-with``: ``with Client(...)`` around ``open`` and ``run()``; the block ends;
- ``client-close``: ``Client.close()`` with the pipeline's stream still open;
- ``pipe-close``: ``RemotePipeline.close()`` then ``Client.close()``;
- ``client-exit``: a client whose stream is open when the script ends (no close at all);
- ``callback-close``: ``Client.close()`` from the done-callback of a call, which gRPC runs
  on its own thread, with the pipeline's stream still open (then the script ends).
"""

from __future__ import annotations

import faulthandler
import gc
import importlib
import itertools
import signal
import sys
import threading
from typing import Any

import conveyor
from conveyor.v1 import service_pb2
from conveyor_server.demo.pipelines import rotate_pipeline
from tests.support.lock_held_at_exit import hold_after_the_exit_hooks

BATCHES = 4
OPTIONS: dict[str, Any] = {"timeout": 5, "failover": False}


def go_on_when_told(took: int) -> None:
    print(f"took {took}", flush=True)
    sys.stdin.readline()


def with_loader(servers: list[str], image_dir: str, way: str) -> Any:
    from torchdata.stateful_dataloader import StatefulDataLoader

    from conveyor.torch import ConveyorDataset

    dataset = ConveyorDataset(servers, "closing", rotate_pipeline(image_dir, batch_size=2),
                              client_options=OPTIONS)
    if way in ("dataset-close", "generator-exit"):
        generator = iter(dataset)
        took = len(list(itertools.islice(generator, BATCHES)))
        go_on_when_told(took)
        if way == "generator-exit":
            return generator  # kept alive until the interpreter exits
        generator.close()  # type: ignore[attr-defined]
        return None
    loader = StatefulDataLoader(dataset, batch_size=None)
    stream = iter(loader)
    took = len(list(itertools.islice(stream, BATCHES)))
    if way == "loader-exit-held":
        assert dataset._pipe is not None
        HOLD_AT_EXIT.append(dataset._pipe._responses._state.condition)
    go_on_when_told(took)
    if way == "loader-del":
        del stream
        gc.collect()
        return None
    return stream  # kept alive until the interpreter exits


def with_client(servers: list[str], image_dir: str, way: str) -> Any:
    spec = rotate_pipeline(image_dir, batch_size=2)
    if way == "client-with":
        with conveyor.Client(servers, **OPTIONS) as client:
            pipe = client.open("closing", spec)
            go_on_when_told(len([pipe.run() for _ in range(BATCHES)]))
        return None
    client = conveyor.Client(servers, **OPTIONS)
    pipe = client.open("closing", spec)
    go_on_when_told(len([pipe.run() for _ in range(BATCHES)]))
    if way == "callback-close":
        closed = threading.Event()

        def close_there(_: object) -> None:
            client.close()
            closed.set()

        describing = client.connection(pipe.via)._stub.DescribePipeline.future(
            service_pb2.DescribePipelineRequest(name="closing"), timeout=5)
        describing.add_done_callback(close_there)
        closed.wait()
        return client, pipe
    if way == "pipe-close":
        pipe.close()
    if way in ("pipe-close", "client-close"):
        client.close()
        return None
    return client, pipe  # client-exit: left open until the interpreter exits


KEPT: list[Any] = []
#: The stream's gRPC call lock, held after the ``atexit`` hooks (``loader-exit-held``).
HOLD_AT_EXIT: list[Any] = []


def main(argv: list[str]) -> None:
    # A trainer that does not exit is asked (SIGUSR1) where each of its threads stands.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    way, image_dir = argv
    if way == "loader-exit-held":
        hold_after_the_exit_hooks(HOLD_AT_EXIT)
    with_torch = way.startswith(("loader", "dataset", "generator"))
    # What the way uses, imported before the servers are known (the test starts them now).
    importlib.import_module("torchdata.stateful_dataloader" if with_torch else "conveyor.client")
    addresses = sys.stdin.readline().strip().split(",")
    if with_torch:
        KEPT.append(with_loader(addresses, image_dir, way))
    else:
        KEPT.append(with_client(addresses, image_dir, way))
    print("ended", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
