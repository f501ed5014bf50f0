"""Fan-in over data channels, with real servers: the workers' batch bytes on their data
channels give exactly the one-server sequence; a worker whose data port cannot be reached
(behind a proxy that passes gRPC alone) starts its call again in gRPC frames and asks
again what it was asked; a worker killed (-9) mid-stream loses and repeats nothing."""

from __future__ import annotations

from pathlib import Path

from tests.fleet.holding_proxy import HoldingProxy
from tests.fleet.support import fleet, read_on, rotating, source_env, trainer
from tests.support.resume import batch_bytes, reference
from tests.support.servers import Start, wait_for

COUNT = 30


def test_a_fan_in_of_two_on_data_channels_is_the_one_server_sequence(
        start_server: Start, image_root: Path) -> None:
    servers = fleet(start_server, 2)
    spec = rotating(image_root)
    with trainer(*servers, data_channel=False) as c:
        alone = c.open("alone", spec)  # one server's stream, in gRPC frames
        one_server = [batch_bytes(alone.run()) for _ in range(COUNT)]
        assert not alone.data_channel
    with trainer(*servers) as c:
        pipe = c.open("fanned", spec, workers=2)
        fan = pipe.fan_in
        assert fan is not None
        # (a worker attaches once its server built the engine)
        wait_for(lambda: sorted(fan.data_channels()) == sorted(s.address for s in servers),
                 "both workers on data channels")
        got = [batch_bytes(pipe.run()) for _ in range(COUNT)]
        assert fan.mismatches == 0
        assert sorted(fan.data_channels()) == sorted(s.address for s in servers)
        assert all(w.delivered for w in fan.workers), "both computed batches"
    assert got == one_server == reference(spec, COUNT)


def test_a_worker_behind_a_grpc_only_proxy_falls_back_to_frames(
        start_server: Start, image_root: Path) -> None:
    """The second server advertises itself through a proxy on 127.0.0.2, where its data
    port (on 127.0.0.1) cannot be reached; the trainer, given the holder alone, knows it
    by that name only (given both addresses, it would reach the second one directly)."""
    proxy = HoldingProxy(host="127.0.0.2")
    holder = start_server(env=source_env())
    behind = start_server("--advertise", proxy.address, env=source_env())
    proxy.forward_to(behind.address)
    spec = rotating(image_root)
    try:
        with trainer(holder) as c:
            pipe = c.open("proxied", spec, workers=2)
            got = [batch_bytes(pipe.run()) for _ in range(COUNT)]
            fan = pipe.fan_in
            assert fan is not None and fan.mismatches == 0
            assert sorted(pipe.workers) == sorted([holder.address, proxy.address])
            assert fan.data_channels() == [holder.address]
            assert c.connection(proxy.address).data_channel_off
            assert proxy.address not in fan.left_out
    finally:
        proxy.close()
    assert got == reference(spec, COUNT)


def test_a_worker_killed_mid_stream_on_a_data_channel(start_server: Start,
                                                       image_root: Path) -> None:
    holder, victim, other = fleet(start_server, 3)
    spec = rotating(image_root)
    with trainer(holder, victim, other) as c:
        pipe = c.open("killed", spec, workers=3)
        got = [batch_bytes(pipe.run()) for _ in range(6)]
        fan = pipe.fan_in
        assert fan is not None
        # (a worker attaches once its server built the engine: maybe after 6 batches)
        wait_for(lambda: victim.address in fan.data_channels(), "the victim's channel")
        victim.kill()
        read_on(pipe, got, COUNT)
        assert victim.address not in pipe.workers and fan.mismatches == 0
    assert got == reference(spec, COUNT), "a batch was lost or repeated"
