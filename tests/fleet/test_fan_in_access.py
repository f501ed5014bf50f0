"""Who and what a worker computes for: a caller who may not stream the pipeline is refused,
and so is a position whose spec is not the pipeline's; a server whose behaviour digest is
not the holder's is left out of the fan-in and logged; token authentication holds on
every worker."""

from __future__ import annotations

import logging
import queue
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import conveyor
from conveyor import errors
from conveyor.transport.connection import error_of
from conveyor.v1 import service_pb2
from conveyor_server.demo.run import rotate_pipeline
from tests.fleet.support import REPO, fleet, rotating, source_env, trainer
from tests.support.resume import batch_bytes, reference
from tests.support.servers import ServerProcess, Start

TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-0123456789"}


def compute(c: conveyor.Client, address: str, name: str, blob: bytes,
            first: int, count: int = 1) -> list[bytes]:
    """One ComputeBatches call made by hand: its frames for ``count`` batches."""
    requests: queue.SimpleQueue[service_pb2.ComputeBatchesRequest | None] = queue.SimpleQueue()
    requests.put(service_pb2.ComputeBatchesRequest(
        start=service_pb2.ComputeStart(name=name, checkpoint=blob)))
    requests.put(service_pb2.ComputeBatchesRequest(
        compute=service_pb2.ComputeRange(first=first, count=count)))
    requests.put(None)

    def each() -> Iterator[service_pb2.ComputeBatchesRequest]:
        while (request := requests.get()) is not None:
            yield request
    try:
        return list(c.connection(address).compute(each()))
    except Exception as exc:  # grpc.RpcError
        raise error_of(exc) from None


@pytest.fixture
def secured(start_server: Start, tmp_path: Path) -> list[ServerProcess]:
    (tmp_path / "tokens.yaml").write_text(yaml.safe_dump(TOKENS))
    (tmp_path / "server.yaml").write_text(yaml.safe_dump(
        {"auth": {"tokens_file": str(tmp_path / "tokens.yaml")}}))
    return start_server.many(2, "--host", "0.0.0.0", "--config", str(tmp_path / "server.yaml"))


def as_(identity: str, servers: list[ServerProcess]) -> conveyor.Client:
    return trainer(*servers, token=TOKENS[identity], tls=False)


def test_a_worker_refuses_a_caller_who_may_not_stream_the_pipeline(
        secured: list[ServerProcess], image_root: Path) -> None:
    spec = rotating(image_root)
    with as_("alice", secured) as alice, as_("bob", secured) as bob:
        pipe = alice.open("alices", spec, workers=2)  # authentication holds on each worker
        got = [batch_bytes(pipe.run()) for _ in range(6)]
        assert len(pipe.workers) == 2
        blob = pipe.tell_holder(6)
        with pytest.raises(errors.PermissionDenied, match="'bob' may not stream"):
            compute(bob, secured[1].address, "alices", blob, 6)
        with pytest.raises(errors.PermissionDenied):
            bob.attach("alices", workers=2)
        frames = compute(alice, secured[1].address, "alices", blob, 6)
        assert frames  # the creator may
    assert got == reference(spec, 6)


def test_a_position_of_another_spec_is_refused(start_server: Start,
                                               image_root: Path) -> None:
    server, worker = fleet(start_server, 2)
    with trainer(server, worker) as c:
        c.create("target", rotating(image_root))
        other = c.create("other", rotate_pipeline(str(image_root / "imgs"), batch_size=3))
        blob = other.tell_holder(0)
        with pytest.raises(errors.SpecMismatch, match="another spec .* than pipeline 'target'"):
            compute(c, worker.address, "target", blob, 0)
        with pytest.raises(errors.InvalidArgument, match="before the position"):
            compute(c, worker.address, "other", other.tell_holder(2), 1)
        with pytest.raises(errors.NotFound, match="'nothing' does not exist"):
            compute(c, worker.address, "nothing", blob, 0)


def test_a_server_with_another_behaviour_digest_is_left_out(
        start_server: Start, image_root: Path, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    servers = fleet(start_server, 2)
    # A server that publishes another behaviour digest (as a build with other operator
    # behaviour would): its output version differs.
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import conveyor_server.service.fleet as fleet\n"
        "fleet.OUTPUT_VERSION = 'another build'\n")
    env = source_env()
    env["PYTHONPATH"] = f"{site}:{REPO}"
    odd = start_server(env=env)
    spec = rotating(image_root)
    with caplog.at_level(logging.WARNING, logger="conveyor.client"), \
            trainer(*servers, odd) as c:
        fleet_digests = {s.address: s.behaviour_digest for s in c.fleet()}
        assert fleet_digests[odd.address] != fleet_digests[servers[0].address]
        pipe = c.open("mixed-fleet", spec, workers="auto")
        got = [batch_bytes(pipe.run()) for _ in range(8)]
        assert sorted(pipe.workers) == sorted(s.address for s in servers)
        assert pipe.fan_in is not None
        assert "behaviour digest" in pipe.fan_in.left_out[odd.address]
    assert any(odd.address in r.getMessage() and "behaviour digest" in r.getMessage()
               for r in caplog.records)
    assert got == reference(spec, 8)
