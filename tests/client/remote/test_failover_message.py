"""A trainer whose server fails, with nowhere to fail over to, is told which server failed
and why nothing took over: no other address was given (and how to give one), none of the
others could, or failover is off; not only gRPC's "Stream removed (Socket closed)"."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import conveyor
from conveyor import errors
from conveyor.torch import ConveyorDataset
from conveyor_server.demo.run import rotate_pipeline
from tests.support.servers import Start, client

HOW = 'give the client several (a list, or one string "host1:port,host2:port") or a DNS name'


def test_a_trainer_whose_only_server_died_is_told_which_and_how_to_give_another(
        start_server: Start, image_root: Path) -> None:
    server = start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    with conveyor.Client(server.address, timeout=5) as client:
        pipe = client.open("alone", spec)
        pipe.run()
        pipe.run()
        server.kill()
        with pytest.raises(errors.Unavailable) as caught:
            pipe.run()
    message = str(caught.value)
    assert message.startswith(f"server {server.address} failed for pipeline 'alone' after "
                               "2 batches: "), message
    assert "no other server address was given to fail over to" in message
    assert HOW in message
    assert caught.value.message == message


def test_a_torch_trainer_whose_only_server_died_is_told_the_same(
        start_server: Start, image_root: Path) -> None:
    server = start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    batches = iter(ConveyorDataset(server.address, "alone-torch", spec,
                                   client_options={"timeout": 5}))
    next(batches)
    server.kill()
    with pytest.raises(errors.Unavailable, match=f"server {server.address} failed") as caught:
        next(batches)
    assert "no other server address was given to fail over to" in str(caught.value)
    assert HOW in str(caught.value)


def test_opening_on_the_only_server_when_it_is_down_says_so(
        start_server: Start, image_root: Path) -> None:
    server = start_server()
    server.kill()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    with conveyor.Client(server.address, timeout=5) as client, \
            pytest.raises(errors.Unavailable) as caught:
        client.open("nowhere", spec)
    message = str(caught.value)
    assert message.startswith(f"server {server.address} failed while opening a pipeline: "
                              "nothing answers there: is it running? is the address "
                              "right? ("), message
    assert "JoinJob" not in message and "CreatePipeline" not in message
    assert "no other server address was given to fail over to" in message


def test_when_the_others_cannot_take_over_or_failover_is_off_the_message_says_so(
        start_server: Start, image_root: Path) -> None:
    a, b = start_server(), start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    # Not placed: both pipelines start on A, the server that dies last.
    with conveyor.Client([a.address, b.address], timeout=5, place=False) as client, \
            conveyor.Client(a.address, timeout=5, failover=False, place=False) as fixed:
        pipe = client.open("both", spec)
        pipe.run()
        other = fixed.open("fixed", spec)
        other.run()
        b.kill()
        a.kill()
        with pytest.raises(errors.Unavailable) as caught:
            pipe.run()
        with pytest.raises(errors.Unavailable) as off:
            other.run()
    assert str(caught.value).startswith(f"server {a.address} failed for pipeline 'both'")
    assert f"none of the other servers ({b.address}) could take over" in str(caught.value)
    assert str(off.value).startswith(f"server {a.address} failed for pipeline 'fixed'")
    assert "failover is off (Client(failover=False))" in str(off.value)


def test_a_pipeline_without_checkpoints_says_once_that_it_cannot_fail_over(
        start_server: Start, image_root: Path, caplog: pytest.LogCaptureFixture) -> None:
    a = start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2, enable_checkpointing=False)
    with caplog.at_level(logging.WARNING, logger="conveyor.client"), client(a) as c:
        pipe = c.create("unsaved", spec)
        for _ in range(3):
            pipe.run()
    said = [r.getMessage() for r in caplog.records if "unsaved" in r.getMessage()]
    assert len(said) == 1, said
    assert "without enable_checkpointing=True: it cannot fail over" in said[0]
    assert "@pipeline_def(..., enable_checkpointing=True)" in said[0]
