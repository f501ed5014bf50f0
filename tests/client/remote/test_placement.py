"""Load-aware placement, with real servers sharing one Redis: new pipelines spread over the
fleet (two random choices weighted by free capacity), full and draining servers are
skipped, one seed address learns the whole fleet, and ``via`` still pins."""

from __future__ import annotations

import urllib.request
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import conveyor
from conveyor.v1 import service_pb2
from conveyor_server.app.metrics import Metrics
from conveyor_server.demo.run import rotate_pipeline
from conveyor_server.service.lifecycle import Runtime
from conveyor_server.service.server import create_server
from conveyor_server.store.redis_process import RedisProcess
from conveyor_server.store.store import Store
from tests.support.servers import DEADLINE, ServerProcess, Start, wait_for

TRAINERS = 8


def trainer(targets: Sequence[str], seed: int) -> conveyor.Client:
    return conveyor.Client(list(targets), timeout=DEADLINE, stream_timeout=120,
                           placement_seed=seed)


def holders(pipes: Sequence[conveyor.RemotePipeline]) -> Counter[str]:
    return Counter(p.via for p in pipes)


def test_eight_trainers_spread_over_four_servers(start_server: Start,
                                                 image_root: Path) -> None:
    """Each trainer opens its pipeline through a Client given all four addresses: the
    first server that answers would take all eight ([8, 0, 0, 0])."""
    servers = [start_server() for _ in range(4)]
    everyone = [s.address for s in servers]
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    clients = [trainer(everyone, seed) for seed in range(TRAINERS)]
    try:
        pipes = [c.open(f"trainer-{i}", spec, run_id="run-1") for i, c in enumerate(clients)]
        spread = holders(pipes)
        assert set(spread) <= set(everyone)
        assert max(spread.values()) <= 4 and len(spread) >= 3, spread
        for pipe in pipes:
            assert pipe.info.holder == pipe.via  # streams go to the server that holds it
        labels = pipes[-1].run()[1]
        assert len(labels) == 2
        # The fleet's records count what each server hosts.
        fleet = {s.address: s for s in clients[0].fleet()}
        assert {a: fleet[a].pipelines for a in spread} == dict(spread)
    finally:
        for c in clients:
            c.close()


def test_one_seed_learns_the_fleet_and_via_pins(start_server: Start, image_root: Path) -> None:
    servers = [start_server() for _ in range(4)]
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    with trainer([servers[0].address], seed=7) as c:
        fleet = c.fleet()
        assert sorted(s.address for s in fleet) == sorted(s.address for s in servers)
        for record in fleet:
            assert not record.draining and record.max_pipelines > 0
            assert record.worker_threads > 0 and record.max_streams > 0
            assert len(record.behaviour_digest) == 32
        assert len({s.behaviour_digest for s in fleet}) == 1  # one build, one behaviour
        pipes = [c.create(f"seeded-{i}", spec) for i in range(TRAINERS)]
        spread = holders(pipes)
        assert max(spread.values()) <= 4 and len(spread) >= 3, spread
        # via pins: a restore on the server named, whatever its load.
        busiest = spread.most_common(1)[0][0]
        saved = c.checkpoint("seeded-0", 0, via=pipes[0].via)
        pinned = c.restore("pinned", saved, via=busiest)
        assert pinned.via == busiest == c.pipeline("pinned").holder
        # Without via, a restore is placed too: on a server that answers for it.
        placed = c.restore("placed", saved)
        assert placed.via == c.pipeline("placed").holder


def _resource_exhausted_creates(server: ServerProcess) -> float:
    with urllib.request.urlopen(server.metrics_url, timeout=5) as reply:
        text = reply.read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples
               if sample.name == "conveyor_rpcs_total"
               and sample.labels.get("method") == "CreatePipeline"
               and sample.labels.get("code") == "RESOURCE_EXHAUSTED")


def test_a_full_server_is_skipped(start_server: Start, image_root: Path) -> None:
    """A server at limits.max_pipelines is never chosen (it would refuse the pipeline)."""
    full = start_server("--max-pipelines", "1", metrics=True)
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    with trainer([full.address], seed=0) as c:
        assert c.create("filler", spec).via == full.address  # the only server
    others = [start_server(), start_server()]
    with trainer([full.address, *(s.address for s in others)], seed=3) as c:
        record = {s.address: s for s in c.fleet()}[full.address]
        assert (record.pipelines, record.max_pipelines) == (1, 1)
        spread = holders([c.create(f"p{i}", spec) for i in range(TRAINERS)])
    assert full.address not in spread and sum(spread.values()) == TRAINERS
    assert _resource_exhausted_creates(full) == 0


def test_a_stopped_server_leaves_the_fleet_at_once(start_server: Start,
                                                   image_root: Path) -> None:
    """A clean stop (SIGTERM drain) deletes the server's record, without waiting for it to
    expire; trainers given its address place their pipelines on the others."""
    a, b, gone = start_server(), start_server(), start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    with trainer([gone.address, a.address, b.address], seed=1) as c:
        assert len(c.fleet()) == 3
        assert gone.terminate() == 0
        assert sorted(s.address for s in c.fleet()) == sorted([a.address, b.address])
        spread = holders([c.create(f"p{i}", spec) for i in range(4)])
    assert set(spread) <= {a.address, b.address}


def test_a_draining_server_is_skipped(redis_proc: RedisProcess, start_server: Start,
                                      image_root: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that drains says so in its record at once, and is skipped while it still
    answers (an in-process server, held in its draining state)."""
    monkeypatch.delenv("CONVEYOR_TOKEN", raising=False)
    monkeypatch.delenv("CONVEYOR_TOKEN_FILE", raising=False)
    other = start_server()
    store = Store(redis_proc.url)
    metrics = Metrics()
    server, port, service, health = create_server("127.0.0.1:0", store, [image_root],
                                                  observer=metrics)
    runtime = Runtime(server, service, health)
    runtime.start()
    draining = f"127.0.0.1:{port}"
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    try:
        with trainer([draining, other.address], seed=2) as c:
            assert len(c.fleet()) == 2
            service.streams.draining.set()  # what a SIGTERM's drain sets first
            runtime.fleet.publish()

            def marked() -> bool:
                return any(s.draining for s in c.fleet() if s.address == draining)
            wait_for(marked, "the draining record")
            spread = holders([c.create(f"p{i}", spec) for i in range(TRAINERS)])
            assert spread == {other.address: TRAINERS}
            assert metrics.registry.get_sample_value(
                "conveyor_rpcs_total", {"method": "CreatePipeline", "code": "OK"}) is None
            c.pipelines()  # it still answers other calls
    finally:
        runtime.stop()
        store.close()


def _info(address: str, *, pipelines: int = 0, max_pipelines: int = 4, busy: float = 0.0,
          draining: bool = False) -> service_pb2.ServerInfo:
    return service_pb2.ServerInfo(address=address, pipelines=pipelines,
                                  max_pipelines=max_pipelines, busy=busy, draining=draining)


def test_the_choice_weighs_free_capacity_and_never_draws_full_or_draining() -> None:
    import random

    from conveyor.remote.placement import Placement

    fleet = [_info("full", pipelines=4), _info("draining", draining=True),
             _info("big", max_pipelines=60), _info("small", max_pipelines=4)]
    placement = Placement(random.Random(11))
    chosen = Counter(placement.choose(fleet).address for _ in range(2000))  # type: ignore[union-attr]
    assert set(chosen) == {"big", "small"}
    # Both empty (a tie): the first drawn wins, "big" 60 times in 64.
    assert chosen["big"] > 10 * chosen["small"]
    assert placement.choose(fleet, frozenset({"big", "small"})) is None
    # Of two drawn, the less loaded wins: with two servers, always the emptier one (by its
    # slots in use plus its busy fraction).
    pair = [_info("a", pipelines=1), _info("b", pipelines=1, busy=0.5)]
    assert {placement.choose(pair).address for _ in range(50)} == {"a"}  # type: ignore[union-attr]
