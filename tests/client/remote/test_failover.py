"""Automatic failover in the client, with real servers: the trainer's loop goes on when its
server is killed, drains, stops answering, or the pipeline is moved; every batch arrives
exactly once, as in an uninterrupted run."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

import conveyor
from conveyor.transport.connection import addresses
from conveyor_server.demo.run import rotate_pipeline
from tests.support.resume import batch_bytes, reference
from tests.support.servers import Start, client

#: Batches a test may read before the stream must have moved.
MOST = 300


def trainer(*servers: str, **kw: float) -> conveyor.Client:
    """A trainer whose pipelines start on the first of ``servers`` (not placed), so the
    faults below hit the server that holds them."""
    return conveyor.Client([*servers], timeout=10, place=False, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("fault", ["kill -9", "SIGTERM drain", "SIGSTOP"])
def test_the_trainer_goes_on_after_its_server_fails(start_server: Start, image_root: Path,
                                                    fault: str) -> None:
    a, b = start_server(), start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    expected = reference(spec, MOST)
    with trainer(a.address, b.address, keepalive_s=1, keepalive_timeout_s=1) as c:
        pipe = c.create("trained", spec)
        got = [batch_bytes(pipe.run()) for _ in range(3)]
        pipe.checkpoint()
        got += [batch_bytes(pipe.run()) for _ in range(3)]
        assert a.proc is not None
        if fault == "kill -9":
            a.kill()
        elif fault == "SIGTERM drain":
            a.proc.send_signal(signal.SIGTERM)
        else:
            a.proc.send_signal(signal.SIGSTOP)
        try:
            # What A had sent comes first (a drain waits for it); then the stream moves.
            while pipe.via != b.address and len(got) < MOST - 4:
                got.append(batch_bytes(pipe.run()))
            got += [batch_bytes(pipe.run()) for _ in range(4)]
        finally:
            if fault == "SIGSTOP":
                a.proc.send_signal(signal.SIGCONT)
        assert got == expected[:len(got)], "a batch was lost or repeated"
        assert pipe.failovers == 1 and pipe.via == b.address
        assert c.pipeline("trained", via=b.address).holder == b.address
        assert pipe.checkpoint().batches == len(got)  # checkpoints follow too


def test_the_trainer_goes_on_before_its_first_checkpoint(start_server: Start,
                                                         image_root: Path) -> None:
    """No checkpoint of the trainer's yet: the one written at creation serves, and the
    new server jumps to the trainer's position in O(1)."""
    a, b = start_server(), start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    expected = reference(spec, MOST)
    with trainer(a.address, b.address, keepalive_s=1, keepalive_timeout_s=1) as c:
        pipe = c.create("fresh", spec)
        got = [batch_bytes(pipe.run()) for _ in range(5)]
        a.kill()
        while pipe.via != b.address and len(got) < MOST - 3:
            got.append(batch_bytes(pipe.run()))
        got += [batch_bytes(pipe.run()) for _ in range(3)]
        assert got == expected[:len(got)], "a batch was lost or repeated"
        assert pipe.failovers == 1
        assert [ck.batches for ck in c.checkpoints("fresh")] == [0]


def test_the_trainer_follows_its_pipeline_to_another_server(start_server: Start,
                                                            image_root: Path) -> None:
    a, b = start_server(), start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    most = MOST
    expected = reference(spec, most)
    with trainer(a.address) as c, client(b) as operator:
        pipe = c.create("moved", spec)
        got = [batch_bytes(pipe.run()) for _ in range(4)]
        saved = pipe.checkpoint()
        got += [batch_bytes(pipe.run()) for _ in range(2)]
        operator.restore("moved", checkpoint=saved.id)  # an operator moves it to B
        # What A sent before its watcher saw B comes first; then the stream follows.
        while pipe.via != b.address and len(got) < most - 5:
            got.append(batch_bytes(pipe.run()))
        got += [batch_bytes(pipe.run()) for _ in range(5)]
        assert pipe.via == b.address and pipe.failovers == 1
        assert got == expected[:len(got)], "a batch was lost or repeated"


def test_targets_lists_and_names(start_server: Start) -> None:
    server = start_server()
    with conveyor.Client(f"{server.address}, 127.0.0.1:1") as c:
        assert c.targets == [server.address, "127.0.0.1:1"]
        assert c.pipelines() == []
    with conveyor.Client(["127.0.0.1:1", server.address], timeout=5) as c:
        assert c.pipelines() == []  # the first target is down: the next one answers
    assert addresses(["127.0.0.1:9", "127.0.0.1:9"]) == ["127.0.0.1:9"]
    resolved = addresses([f"localhost:{server.port}"])
    assert resolved and all(r.endswith(f":{server.port}") for r in resolved)


def test_one_seed_address_is_enough_to_fail_over(start_server: Start,
                                                 image_root: Path) -> None:
    """A client given only A learns B from the servers' records in their Redis, and the
    trainer goes on at B when A dies (it refused to, knowing A alone)."""
    a, b = start_server(), start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    expected = reference(spec, MOST)
    with trainer(a.address, keepalive_s=1, keepalive_timeout_s=1) as c:
        pipe = c.create("seeded", spec)
        got = [batch_bytes(pipe.run()) for _ in range(3)]
        assert sorted(c.servers()) == sorted([a.address, b.address])
        pipe.checkpoint()
        a.kill()
        while pipe.via != b.address and len(got) < MOST - 3:
            got.append(batch_bytes(pipe.run()))
        got += [batch_bytes(pipe.run()) for _ in range(3)]
        assert got == expected[:len(got)], "a batch was lost or repeated"
        assert pipe.failovers == 1 and pipe.via == b.address
        assert c.pipeline("seeded").holder == b.address  # other calls find B too
