"""Authentication against real servers: on by default (without credentials, clients on the
server's own host only, as Redis's protected mode), off only when asked, tokens from a
file that is read again when it changes, credentials checked before a request is parsed,
clients reading their token from a file, pipelines of the configuration created as their
owner."""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

import conveyor
from conveyor import errors
from conveyor.transport.channel import SERVICE_NAME, bearer
from conveyor.transport.credentials import TlsOptions, read_token
from conveyor_server.demo.run import rotate_pipeline
from conveyor_server.service.tokens import TokenFileError, parse_tokens
from tests.support.certs import CertificateAuthority
from tests.support.servers import ServerProcess

Start = Callable[..., ServerProcess]
ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789"


def non_loopback_ip() -> str | None:
    """An address of this host that is not loopback, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))  # no packet is sent: it picks a route
            ip = str(s.getsockname()[0])
        except OSError:
            return None
    return None if ipaddress.ip_address(ip).is_loopback else ip


def tokens_file(path: Path, tokens: dict[str, str]) -> Path:
    path.write_text(yaml.safe_dump(tokens))
    return path


def test_without_credentials_only_local_clients_are_served(start_server: Start,
                                                           image_root: Path) -> None:
    ip = non_loopback_ip()
    if ip is None:
        pytest.skip("this host has no non-loopback IPv4 address to call from")
    server = start_server("--host", "0.0.0.0")
    with conveyor.Client(server.address, timeout=10) as local:
        local.create("local", rotate_pipeline(str(image_root / "imgs")))
    remote_address = f"{ip}:{server.port}"
    with conveyor.Client(remote_address, timeout=10) as remote, \
            pytest.raises(errors.Unauthenticated) as refused:
        remote.pipelines()
    assert f"ipv4:{ip}:" in refused.value.message
    for what in ("auth.tokens_file", "tls.client_ca_file", "auth.disabled"):
        assert what in refused.value.message
    with grpc.insecure_channel(remote_address) as channel:  # health needs no credentials
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    assert "accepting clients on this host only" in server.log()


def test_disabled_authentication_serves_everyone_and_warns(
        start_server: Start, image_root: Path) -> None:
    ip = non_loopback_ip()
    if ip is None:
        pytest.skip("this host has no non-loopback IPv4 address to call from")
    server = start_server("--host", "0.0.0.0", env={"CONVEYOR_AUTH_DISABLED": "true"})
    with conveyor.Client(f"{ip}:{server.port}", timeout=10) as remote:
        remote.create("open", rotate_pipeline(str(image_root / "imgs")))
        assert [p.name for p in remote.pipelines()] == ["open"]
    assert "authentication is disabled (auth.disabled: true)" in server.log()
    assert "WARNING" in server.log()


def test_tokens_are_read_again_when_the_file_changes(start_server: Start,
                                                     tmp_path: Path) -> None:
    path = tokens_file(tmp_path / "tokens.yaml", {"alice": ALICE})
    server = start_server("--tokens-file", str(path))
    with conveyor.Client(server.address, token=ALICE, timeout=10) as c:
        assert c.pipelines() == []
    rotated = "alice-rotated-0123456789"
    tokens_file(tmp_path / "tokens.new", {"alice": rotated, "bob": BOB})
    (tmp_path / "tokens.new").replace(path)
    deadline = time.monotonic() + 10
    while True:
        with conveyor.Client(server.address, token=ALICE, timeout=10) as old:
            try:
                old.pipelines()
            except errors.Unauthenticated:
                break
        assert time.monotonic() < deadline, "the old token is still accepted"
        time.sleep(0.2)
    for token in (rotated, BOB):
        with conveyor.Client(server.address, token=token, timeout=10) as c:
            assert c.pipelines() == []
    # A broken file keeps the tokens read before, and says why in the log.
    path.write_text("alice: short\n")
    time.sleep(1.5)
    with conveyor.Client(server.address, token=rotated, timeout=10) as c:
        assert c.pipelines() == []
    assert "entry 'alice': the token has 5 characters, at least 16" in server.log()
    assert rotated not in server.log() and "'short'" not in server.log()  # no token shown


def test_credentials_are_checked_before_the_request_is_parsed(
        start_server: Start, tmp_path: Path) -> None:
    server = start_server("--tokens-file", str(tokens_file(tmp_path / "t.yaml",
                                                           {"alice": ALICE})))
    garbage = b"\x0a\x05ab"  # field 1, 5 bytes announced, 2 given: not a message
    with grpc.insecure_channel(server.address) as channel:
        call = channel.unary_unary(f"/{SERVICE_NAME}/ListPipelines")
        with pytest.raises(grpc.RpcError) as anonymous:
            call(garbage, timeout=10)
        assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as parsed:
            call(garbage, timeout=10, metadata=(("authorization", bearer(ALICE)),))
        assert parsed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "the request is not a valid conveyor.v1.ListPipelinesRequest" in \
            parsed.value.details()
        stream = channel.stream_stream(f"/{SERVICE_NAME}/StreamBatches")
        with pytest.raises(grpc.RpcError) as streamed:
            list(stream(iter([garbage]), timeout=10))
        assert streamed.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_clients_read_their_token_from_a_file(start_server: Start, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    server = start_server("--tokens-file", str(tokens_file(tmp_path / "t.yaml",
                                                           {"alice": ALICE})))
    secret = tmp_path / "alice.token"
    secret.write_text(ALICE + "\n")
    with conveyor.Client(server.address, token_file=str(secret), timeout=10) as c:
        assert c.pipelines() == []
    monkeypatch.setenv("CONVEYOR_TOKEN_FILE", str(secret))
    with conveyor.Client(server.address, timeout=10) as c:
        assert c.pipelines() == []
    cli = subprocess.run([sys.executable, "-m", "conveyor.cli", "--server", server.address,
                          "--token-file", "-", "pipelines"], input=ALICE, text=True,
                         capture_output=True, timeout=60, check=False)
    assert cli.returncode == 0 and cli.stdout.startswith("NAME"), cli.stderr
    empty = tmp_path / "empty.token"
    empty.write_text("\n")
    with pytest.raises(errors.InvalidArgument, match="empty.token' is empty"):
        read_token(token_file=str(empty), env={})
    assert read_token(env={"CONVEYOR_TOKEN": "from-env"}) == "from-env"


def test_tokens_files_are_checked_entry_by_entry() -> None:
    good = parse_tokens("team-a: 0123456789abcdef\nspiffe://x/ops: fedcba9876543210\n", "f")
    assert good == {"team-a": "0123456789abcdef", "spiffe://x/ops": "fedcba9876543210"}
    for text, message in (
            ("alice: 0123456789abcde\n", "entry 'alice': the token has 15 characters, at "
                                         "least 16"),
            ("a: 0123456789abcdef\nb: 0123456789abcdef\n", "entries 'a' and 'b' have the "
                                                          "same token"),
            ("anonymous: 0123456789abcdef\n", "'anonymous' is reserved"),
            ("[a, b]\n", "expected a mapping of 'name: token' entries"),
            ("'bad name': 0123456789abcdef\n", "identity 'bad name' is invalid"),
            ("alice: [1, 2]\n", "entry 'alice': the token must be a non-empty string")):
        with pytest.raises(TokenFileError, match="^f: ") as caught:
            parse_tokens(text, "f")
        assert message in caught.value.message
        assert "0123456789abcde" not in caught.value.message


@pytest.mark.parametrize(("config", "message"), [
    ({"auth": {"disabled": True, "tokens_file": "/x"}}, "auth.disabled: true, but tokens"),
    ({"auth": {"tokens_file": "{tokens}"}, "pipelines": [
        {"name": "p", "spec_file": "p.json"}]}, "pipelines[0].owner: required when clients "
                                                "authenticate"),
    ({"auth": {"operators": ["has space"]}}, "auth.operators[0]: identity 'has space'"),
    ({"auth": {"tokens_file": "{folder}/absent.yaml"}}, "cannot read it"),
])
def test_configurations_that_cannot_be_secured_stop_the_server(
        tmp_path: Path, config: dict[str, object], message: str) -> None:
    tokens = tokens_file(tmp_path / "tokens.yaml", {"alice": ALICE})
    text = yaml.safe_dump(config).replace("{tokens}", str(tokens)).replace(
        "{folder}", str(tmp_path))
    (tmp_path / "p.json").write_text("{}")
    (tmp_path / "server.yaml").write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "conveyor_server.app.main", "--config",
         str(tmp_path / "server.yaml"), "--host", "127.0.0.1", "--port", "0",
         "--data-root", str(tmp_path), "--redis-url", "redis://127.0.0.1:1/0"],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr, done.stderr


def test_configured_pipelines_are_created_as_their_owner(
        start_server: Start, image_root: Path, tmp_path: Path) -> None:
    """Over mTLS with client certificates only (no tokens file): the server creates its
    pipelines through its own API as their owner, whose certificate then streams them."""
    from google.protobuf import json_format

    ca = CertificateAuthority()
    ca_file = ca.write(tmp_path / "ca.pem")
    cert, key = ca.issue("127.0.0.1").write(tmp_path / "s.pem", tmp_path / "s.key")

    def tls(name: str, san: str) -> TlsOptions:
        c, k = ca.issue(san, client=True).write(tmp_path / f"{name}.pem",
                                                tmp_path / f"{name}.key")
        return TlsOptions(ca_file=str(ca_file), cert_file=str(c), key_file=str(k))

    trainer, other = tls("trainer", "spiffe://example.org/trainer"), tls("o", "other.svc")
    spec = json_format.MessageToDict(rotate_pipeline(str(image_root / "imgs")).spec)
    (tmp_path / "server.yaml").write_text(yaml.safe_dump({
        "tls": {"cert_file": str(cert), "key_file": str(key), "client_ca_file": str(ca_file)},
        "pipelines": [{"name": "train", "spec": spec,
                       "owner": "spiffe://example.org/trainer"}]}))
    server = start_server("--config", str(tmp_path / "server.yaml"), tls=trainer)
    with conveyor.Client(server.address, tls=trainer, timeout=10) as c:
        assert len(c.attach("train").run()[1]) == 8
    with conveyor.Client(server.address, tls=other, timeout=10) as c, \
            pytest.raises(errors.PermissionDenied):
        c.attach("train")
    assert "created pipeline train from the configuration" in server.log()
