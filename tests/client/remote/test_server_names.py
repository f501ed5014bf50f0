"""One name per server in what a trainer sees. Servers listening on every interface
advertise themselves by this machine's host name ("vm:PORT"), while the trainer reaches
them at the addresses it was given ("127.0.0.1:PORT"): the fleet, the servers it may fail
over to, a fan-in's workers, a failover and its message, and the CLI's holder all speak of
the given addresses (the advertised name beside them in messages), and a dead server is
never listed as another one."""

from __future__ import annotations

import logging
import re
import socket
from pathlib import Path

import pytest

import conveyor
from conveyor import errors
from conveyor.cli import main as cli
from conveyor_server.demo.run import rotate_pipeline
from tests.support.resume import batch_bytes, reference
from tests.support.servers import DEADLINE, ServerProcess, Start

#: Listening on every interface, a server advertises the machine's host name.
EVERY_INTERFACE = ("--host", "0.0.0.0")


def advertised(server: ServerProcess) -> str:
    return f"{socket.gethostname()}:{server.port}"


def trainer(servers: list[ServerProcess], **kw: object) -> conveyor.Client:
    return conveyor.Client([s.address for s in servers], timeout=DEADLINE,
                           stream_timeout=120, placement_seed=7, **kw)  # type: ignore[arg-type]


def test_the_fleet_workers_and_a_failover_use_the_addresses_the_trainer_gave(
        start_server: Start, image_root: Path, caplog: pytest.LogCaptureFixture) -> None:
    servers = start_server.many(2, *EVERY_INTERFACE)
    given = [s.address for s in servers]
    assert advertised(servers[0]) not in given  # the two names differ
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    expected = reference(spec, 6)
    with trainer(servers) as client:
        assert sorted(s.address for s in client.fleet()) == sorted(given)
        assert client.servers() == given  # no advertised name beside them
        fanned = client.open("fanned", spec, workers=2)
        assert [batch_bytes(fanned.run()) for _ in range(3)] == expected[:3]
        assert set(fanned.workers) <= set(given)
        assert fanned.fan_in is not None and fanned.fan_in.left_out == {}
        fanned.close()

        pipe = client.open("named", spec)
        holder = next(s for s in servers if s.address == pipe.via)
        other = next(s for s in servers if s is not holder)
        assert pipe.info.holder == advertised(holder)  # the server's own record
        assert client.reach(pipe.info.holder) == holder.address
        assert client.known_as(pipe.info.holder) == \
            f"{holder.address} (advertised as {advertised(holder)})"
        got = [batch_bytes(pipe.run()) for _ in range(3)]
        holder.kill()
        with caplog.at_level(logging.WARNING, logger="conveyor.client"):
            got += [batch_bytes(pipe.run()) for _ in range(3)]
        assert got == expected
        assert pipe.via == other.address
        moved = [r.getMessage() for r in caplog.records if "moved from" in r.getMessage()]
        assert moved and (f"moved from {holder.address} (advertised as {advertised(holder)}) "
                          f"to {other.address} (advertised as {advertised(other)})"
                          ) in moved[0], moved


def test_a_dead_server_is_never_listed_as_another_one(start_server: Start,
                                                      image_root: Path) -> None:
    servers = start_server.many(2, *EVERY_INTERFACE)
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    with trainer(servers) as client:
        pipe = client.open("stranded", spec)
        pipe.run()
        holder = next(s for s in servers if s.address == pipe.via)
        other = next(s for s in servers if s is not holder)
        for server in servers:
            server.kill()
        with pytest.raises(errors.Unavailable) as caught:
            pipe.run()
    message = caught.value.message
    assert message.startswith(f"server {holder.address} (advertised as {advertised(holder)}) "
                              "failed for pipeline 'stranded' after 1 batches: "), message
    others = re.search(r"none of the other servers \((.*)\) could take over", message)
    assert others is not None, message
    assert others.group(1) == f"{other.address} (advertised as {advertised(other)})", message


def test_one_seed_names_the_servers_it_was_not_given_by_their_advertised_names(
        start_server: Start) -> None:
    seed, unseen = start_server.many(2, *EVERY_INTERFACE)
    with trainer([seed]) as client:
        client.learn_fleet()
        assert client.servers() == [seed.address, advertised(unseen)]
        assert client.known_as(advertised(seed)) == \
            f"{seed.address} (advertised as {advertised(seed)})"
        assert client.known_as(advertised(unseen)) == advertised(unseen)


def test_the_cli_names_a_holder_by_the_address_it_was_given(
        start_server: Start, image_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = start_server(*EVERY_INTERFACE)
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    with trainer([server]) as client:
        client.create("listed", spec).close()
    shown = f"{server.address} (advertised as {advertised(server)})"
    capsys.readouterr()
    assert cli(["--server", server.address, "pipelines"]) == 0
    assert re.search(rf"listed\s+{re.escape(shown)}\s+yes", capsys.readouterr().out)
    assert cli(["--server", server.address, "describe", "listed"]) == 0
    assert f"holder:        {shown} (generation " in capsys.readouterr().out
