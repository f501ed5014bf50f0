"""What ``Client`` and the adapters take as their servers is checked at once, in one place
(``connection.server_targets``): a string or a sequence of strings; anything else is a
TypeError naming the type given and what to pass. An in-process
``conveyor_server.Pipeline`` given as the servers (DALI's ``DALIGenericIterator(pipe,
...)`` reflex) used to be read as an endless list: 100% CPU, forever."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import conveyor
from conveyor import errors
from conveyor.torch import ConveyorDataset
from conveyor.transport.connection import server_targets
from conveyor_server import Pipeline
from conveyor_server.demo.run import rotate_pipeline

ROOT = Path(__file__).resolve().parents[3]
WANTED = '"host:port"'


@pytest.mark.parametrize(("servers", "targets"), [
    ("127.0.0.1:1", ["127.0.0.1:1"]),
    (" a:1, b:2 ,", ["a:1", "b:2"]),
    (["a:1", "b:2,c:3"], ["a:1", "b:2", "c:3"]),
    (("a:1",), ["a:1"]),
])
def test_addresses_are_taken_as_a_string_or_a_sequence_of_strings(
        servers: Any, targets: list[str]) -> None:
    assert server_targets(servers, "who") == targets
    client = conveyor.Client(servers)
    assert client.targets == targets
    client.close()


@pytest.mark.parametrize(("servers", "named"), [
    (5, "got int 5"), (None, "got None"), (b"a:1", "got bytes b'a:1'"),
    ({"a:1"}, "got a set object"), (iter(["a:1"]), "got a list_iterator object"),
    ({"a:1": 1}, "got a dict object"), (["a:1", 7], "item 1 is int 7, not a string"),
])
def test_anything_else_is_a_type_error_naming_what_was_given(servers: Any,
                                                            named: str) -> None:
    with pytest.raises(TypeError, match="conveyor.Client: target must be") as raised:
        conveyor.Client(servers)
    assert named in str(raised.value) and WANTED in str(raised.value)
    spec = rotate_pipeline("/nonexistent", batch_size=2)
    with pytest.raises(TypeError, match="conveyor.torch.ConveyorDataset: servers") as raised:
        ConveyorDataset(servers, "x", spec)
    assert named in str(raised.value) and WANTED in str(raised.value)


@pytest.mark.parametrize("servers", ["", " , ", []])
def test_no_address_at_all_is_an_invalid_argument(servers: Any) -> None:
    with pytest.raises(errors.InvalidArgument, match="names no server"):
        conveyor.Client(servers)


CALLERS = [("client", "conveyor.Client: target must be"),
           ("torch", "conveyor.torch.ConveyorDataset: servers must be"),
           # The tf adapter makes its Client first thing: the same check, at once.
           ("tf", "conveyor.Client: target must be")]


def skips_tensorflow() -> bool:
    return os.environ.get("CONVEYOR_SKIP_TENSORFLOW_TESTS") == "1"


@pytest.fixture(scope="module")
def refusals(image_root: Path) -> dict[str, dict[str, list[str]]]:
    """What each caller (client, torch, tf) raised for each of
    ``tests.support.arguments_child``'s servers, the in-process pipeline among them: one
    process for every caller, which must end at once."""
    callers = [c for c, _ in CALLERS if not (c == "tf" and skips_tensorflow())]
    try:
        done = subprocess.run([sys.executable, "-m", "tests.support.arguments_child",
                               str(image_root / "imgs"), *callers], cwd=ROOT,
                              capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{', '.join(callers)}: giving one a pipeline object as the servers did "
                    "not end")
    assert done.returncode == 0, done.stderr[-3000:]
    raised: dict[str, dict[str, list[str]]] = json.loads(done.stdout.splitlines()[-1])
    return raised


@pytest.mark.parametrize(("caller", "who"), CALLERS)
def test_a_pipeline_object_given_as_the_servers_is_refused_at_once(
        refusals: dict[str, dict[str, list[str]]], caller: str, who: str) -> None:
    if caller == "tf" and skips_tensorflow():
        pytest.skip("CONVEYOR_SKIP_TENSORFLOW_TESTS=1: the TensorFlow adapter is NOT tested")
    raised = dict(refusals[caller])
    kind, message = raised.pop("pipeline")
    assert kind == "TypeError", message
    assert message.startswith(who), message
    assert f"got a {Pipeline.__module__}.{Pipeline.__qualname__} object" in message
    assert WANTED in message and "a list of them" in message
    if caller == "torch":
        assert "the servers run it from spec" in message
    for given, (kind, message) in raised.items():
        assert (kind, message.startswith(who)) == ("TypeError", True), (given, message)
