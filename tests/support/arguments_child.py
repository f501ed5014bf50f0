"""A process for ``tests/client/remote/test_client_arguments.py``: gives ``Client`` or an
adapter servers that are not server addresses, an in-process ``conveyor_server.Pipeline``
(an endless iterable) among them, and prints, as JSON, what each raised, per caller.

``python -m tests.support.arguments_child IMAGE_DIR CALLER...``; each CALLER is ``client``,
``torch`` or ``tf`` (one process for all: each caller's own process cost an interpreter
start more)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import conveyor
from conveyor_server import Pipeline
from conveyor_server.demo.pipelines import rotate_pipeline


def caller(name: str, spec: Any) -> Callable[[Any], object]:
    if name == "client":
        return conveyor.Client
    if name == "torch":
        from conveyor.torch import ConveyorDataset
        return lambda servers: ConveyorDataset(servers, "x", spec)
    from conveyor.tf import ConveyorDataset as TfDataset
    return lambda servers: TfDataset(servers, "x", spec)


def refusals(name: str, image_dir: str) -> dict[str, list[str]]:
    """What ``name``'s servers argument raised (or made) for each kind of servers given."""
    spec = rotate_pipeline(image_dir, batch_size=2)
    make = caller(name, spec)
    given = {"pipeline": Pipeline(spec, data_roots=[image_dir]), "int": 5, "none": None,
             "bytes": b"127.0.0.1:1", "set": {"127.0.0.1:1"},
             "generator": (a for a in ["127.0.0.1:1"]), "item": ["127.0.0.1:1", 7]}
    raised = {}
    for key, servers in given.items():
        try:
            made = make(servers)
        except Exception as exc:  # what it raised, whatever it is, is the answer
            raised[key] = [type(exc).__name__, str(exc)]
        else:
            raised[key] = ["nothing", repr(made)]
    return raised


def main(argv: list[str]) -> None:
    image_dir, *names = argv
    print(json.dumps({name: refusals(name, image_dir) for name in names}))


if __name__ == "__main__":
    main(sys.argv[1:])
