"""Assembling the service: handlers registered from the descriptors with their kinds
checked, and an in-process server on port 0 with its interceptors (auth, RPC metrics)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor.client import Client
from conveyor.errors import NotFound, Unauthenticated
from conveyor.transport.channel import SERVICE_NAME, wait_serving
from conveyor_server.app.metrics import Metrics
from conveyor_server.demo.run import rotate_pipeline
from conveyor_server.service import rpc_kinds
from conveyor_server.service.identity import Authenticator
from conveyor_server.service.lifecycle import Runtime
from conveyor_server.service.registration import CONVEYOR, service_handler
from conveyor_server.service.server import create_server
from conveyor_server.service.tokens import Tokens
from conveyor_server.store.redis_process import RedisProcess
from conveyor_server.store.store import Store

MARKERS: dict[str, Callable[[Any], Any]] = {
    rpc_kinds.UNARY: rpc_kinds.unary, rpc_kinds.SERVER_STREAMING: rpc_kinds.server_streaming,
    rpc_kinds.CLIENT_STREAMING: rpc_kinds.client_streaming,
    rpc_kinds.BIDI_STREAMING: rpc_kinds.bidi_streaming,
}


def handler(streaming: bool) -> Callable[..., Any]:
    """A new handler function (markers set attributes on the function object itself)."""
    if streaming:
        def stream(self: Any, request: Any, context: Any) -> Iterator[bytes]:
            yield b""
        return stream

    def unary(self: Any, request: Any, context: Any) -> Any:
        return None
    return unary


def servicer(**overrides: Any) -> object:
    """A servicer with a well-formed handler for every RPC, but for ``overrides``."""
    methods: dict[str, Any] = {
        m.name: MARKERS[rpc_kinds.kind_of(m)](handler(m.server_streaming))
        for m in CONVEYOR.methods}
    methods.update(overrides)
    return type("Servicer", (), methods)()


def test_a_well_formed_servicer_registers_every_rpc() -> None:
    generic = service_handler(servicer())
    assert generic.service_name() == SERVICE_NAME


@pytest.mark.parametrize(("overrides", "message"), [
    ({"GetCheckpoint": None},
     "has no handler for conveyor.v1.Conveyor.GetCheckpoint (unary)"),
    ({"StreamBatches": rpc_kinds.unary(handler(True))},
     "conveyor.v1.Conveyor.StreamBatches is bidi streaming in the service's descriptor, but "
     "Servicer.StreamBatches is declared unary"),
    ({"Restore": handler(False)},
     "Servicer.Restore is declared without a kind"),
    ({"Restore": rpc_kinds.unary(handler(True))},
     "Servicer.Restore must be a plain function: conveyor.v1.Conveyor.Restore is unary"),
    ({"StreamBatches": rpc_kinds.bidi_streaming(handler(False))},
     "Servicer.StreamBatches must be a generator"),
    ({"Rewind": rpc_kinds.unary(handler(False))},
     "Servicer marks Rewind as RPC handlers, but conveyor.v1.Conveyor has no such RPC"),
])
def test_registration_refuses_a_handler_that_does_not_match_the_descriptor(
        overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(TypeError) as caught:
        service_handler(servicer(**overrides))
    assert message in str(caught.value)


def _rpcs(metrics: Metrics, method: str, code: str) -> float:
    value = metrics.registry.get_sample_value("conveyor_rpcs_total",
                                              {"method": method, "code": code})
    return value or 0.0


def test_an_in_process_server_on_port_0_authenticates_and_counts_its_rpcs(
        redis_proc: RedisProcess, image_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONVEYOR_TOKEN", raising=False)
    monkeypatch.delenv("CONVEYOR_TOKEN_FILE", raising=False)
    metrics = Metrics()
    store = Store(redis_proc.url)
    secret = "s3cret-of-alice-0123"
    server, port, service, health = create_server(
        "127.0.0.1:0", store, [image_root], observer=metrics,
        authenticator=Authenticator(tokens=Tokens(fixed={"alice": secret})))
    runtime = Runtime(server, service, health)
    runtime.start()
    address = f"127.0.0.1:{port}"
    try:
        wait_serving(address, 10, SERVICE_NAME)  # health answers without a token
        for token, why in ((None, "missing credentials"), (secret[:-1], "wrong token"),
                           (secret + "-and-more", "wrong token")):
            with Client(address, token=token) as client, \
                    pytest.raises(Unauthenticated, match=why):
                client.pipelines()
        with Client(address, token=secret) as client:
            assert client.pipelines() == []
            with pytest.raises(NotFound):
                client.pipeline("absent")
            pipe = client.create("assembled", rotate_pipeline(str(image_root / "imgs")))
            labels = pipe.run()[1]
            assert len(labels) == 8
            pipe.close()
        assert _rpcs(metrics, "ListPipelines", "UNAUTHENTICATED") == 3
        assert _rpcs(metrics, "ListPipelines", "OK") == 1
        assert _rpcs(metrics, "DescribePipeline", "NOT_FOUND") == 1
        assert _rpcs(metrics, "CreatePipeline", "OK") == 1
    finally:
        runtime.stop()
        store.close()
