"""TLS and mTLS against real servers with real certificates made by the test (a CA, a
server certificate for 127.0.0.1 and localhost, client certificates): plaintext is
refused, a client with the CA works end to end, mTLS refuses clients without a certificate
or with one from another CA, a certificate's SAN is the caller's identity, and the server
picks up rotated certificate files for new connections."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import conveyor
from conveyor import errors
from conveyor.transport.credentials import TlsOptions
from conveyor_server import Pipeline
from conveyor_server.demo.run import rotate_pipeline
from tests.support.certs import CertificateAuthority, peer_serial
from tests.support.resume import batch_bytes, run_batches
from tests.support.servers import ServerProcess

Start = Callable[..., ServerProcess]
DEADLINE = 20.0


@dataclass
class Pki:
    """A CA and the files a TLS server and its clients use, in one folder."""
    folder: Path
    ca: CertificateAuthority
    ca_file: Path
    cert: Path
    key: Path

    def client(self, name: str, *sans: str, ca: CertificateAuthority | None = None
               ) -> TlsOptions:
        """Options of a client with a certificate for ``sans`` (by this CA or ``ca``)."""
        issued = (ca or self.ca).issue(*sans, client=True)
        cert, key = issued.write(self.folder / f"{name}.pem", self.folder / f"{name}.key")
        return TlsOptions(ca_file=str(self.ca_file), cert_file=str(cert), key_file=str(key))

    @property
    def plain(self) -> TlsOptions:
        """A client that verifies the server and presents no certificate."""
        return TlsOptions(ca_file=str(self.ca_file))

    def live_files(self) -> Path:
        """The server's certificate and key as a Kubernetes Secret volume serves them: a folder
        per version (``v1``: these files) behind the link returned (``live``), which
        ``swap_live`` points elsewhere."""
        live, first = self.folder / "live", self.folder / "v1"
        first.mkdir()
        shutil.copy(self.cert, first / "tls.crt")
        shutil.copy(self.key, first / "tls.key")
        live.symlink_to(first)
        return live

    def swap_live(self, folder: Path) -> None:
        """Point ``live`` at ``folder`` at once, as the kubelet swaps its ``..data`` link."""
        link = self.folder / "live.tmp"
        link.symlink_to(folder)
        link.replace(self.folder / "live")


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    folder = tmp_path / "pki"
    folder.mkdir()
    ca = CertificateAuthority()
    cert, key = ca.issue("127.0.0.1", "localhost").write(folder / "server.pem",
                                                         folder / "server.key")
    return Pki(folder, ca, ca.write(folder / "ca.pem"), cert, key)


def tls_args(pki: Pki, *, mutual: bool = False) -> list[str]:
    args = ["--tls-cert", str(pki.cert), "--tls-key", str(pki.key)]
    return [*args, "--tls-client-ca", str(pki.ca_file)] if mutual else args


def client(server: ServerProcess, **kw: Any) -> conveyor.Client:
    return conveyor.Client(server.address, timeout=DEADLINE, stream_timeout=120, **kw)


def test_a_plaintext_client_is_refused_by_a_tls_server(start_server: Start, pki: Pki) -> None:
    server = start_server(*tls_args(pki), tls=pki.plain)
    with client(server, tls=False) as plain, pytest.raises(errors.Unavailable):
        plain.pipelines()
    # Nor does a client that trusts another CA accept this server.
    stranger = CertificateAuthority("another CA").write(pki.folder / "other-ca.pem")
    with client(server, tls=TlsOptions(ca_file=str(stranger))) as wrong, \
            pytest.raises(errors.Unavailable):
        wrong.pipelines()


def test_a_tls_client_creates_streams_checkpoints_and_restores(
        start_server: Start, pki: Pki, image_root: Path) -> None:
    server = start_server(*tls_args(pki), tls=pki.plain)
    spec = rotate_pipeline(str(image_root / "imgs"))
    with client(server, tls=pki.plain) as c, Pipeline(spec) as local:
        pipe = c.create("secure", spec)
        expected = run_batches(local, 4)
        for i in range(2):
            assert batch_bytes(pipe.run()) == batch_bytes(expected[i])
        ckpt = pipe.checkpoint()
        assert ckpt.batches == 2
        copy = c.restore("secure-copy", checkpoint=ckpt.id)
        assert batch_bytes(copy.run()) == batch_bytes(expected[2])
        assert np.array_equal(pipe.run()[0].at(0), expected[2][0].at(0))
        assert sorted(p.name for p in c.pipelines()) == ["secure", "secure-copy"]
    # By name as well as by address: "localhost" is in the certificate, and a server
    # reached by IP is checked against the name of the first target.
    with conveyor.Client(f"localhost:{server.port}", tls=pki.plain, timeout=DEADLINE) as c:
        assert c.pipeline("secure").holder == server.address


def test_the_cli_and_the_probe_speak_tls(start_server: Start, pki: Pki,
                                         image_root: Path) -> None:
    server = start_server(*tls_args(pki), tls=pki.plain)
    with client(server, tls=pki.plain) as c:
        c.create("listed", rotate_pipeline(str(image_root / "imgs")))
    cli = [sys.executable, "-m", "conveyor.cli", "--server", server.address]
    done = subprocess.run([*cli, "--tls-ca", str(pki.ca_file), "pipelines"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and "listed" in done.stdout, done.stderr
    env = {"CONVEYOR_TLS_CA": str(pki.ca_file), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([*cli, "describe", "listed"], capture_output=True, text=True,
                          timeout=60, check=False, env=env)
    assert done.returncode == 0 and "holder:" in done.stdout, done.stderr
    probe = [sys.executable, "-m", "conveyor_server.app.probe", "--address", server.address,
             "--timeout", "5"]
    ok = subprocess.run([*probe, "--tls-ca", str(pki.ca_file)], capture_output=True,
                        text=True, timeout=60, check=False)
    assert ok.returncode == 0 and "is SERVING" in ok.stdout, ok.stderr
    plain = subprocess.run(probe, capture_output=True, text=True, timeout=60, check=False)
    assert plain.returncode == 1 and "unreachable" in plain.stderr


def test_mtls_refuses_clients_without_a_certificate_or_from_another_ca(
        start_server: Start, pki: Pki, image_root: Path) -> None:
    trainer = pki.client("trainer", "spiffe://example.org/ns/ml/sa/trainer")
    server = start_server(*tls_args(pki, mutual=True), tls=trainer)
    with client(server, tls=pki.plain) as anonymous, pytest.raises(errors.Unavailable):
        anonymous.pipelines()
    other = pki.client("intruder", "spiffe://example.org/ns/ml/sa/trainer",
                       ca=CertificateAuthority("another CA"))
    with client(server, tls=other) as intruder, pytest.raises(errors.Unavailable):
        intruder.pipelines()
    with client(server, tls=trainer) as c:
        pipe = c.create("mutual", rotate_pipeline(str(image_root / "imgs")))
        assert len(pipe.run()[1]) == 8
        assert pipe.checkpoint().batches == 1


def test_a_client_certificate_is_the_callers_identity(
        start_server: Start, pki: Pki, image_root: Path) -> None:
    """The first URI SAN (else the first DNS SAN) names the caller: another certificate
    is another tenant, and the operator's may act on every pipeline."""
    team_a = pki.client("team-a", "spiffe://example.org/ns/ml/sa/team-a", "a.ml.svc")
    team_b = pki.client("team-b", "b.ml.svc")
    ops = pki.client("ops", "spiffe://example.org/ns/ops/sa/oncall")
    server = start_server(*tls_args(pki, mutual=True), "--config",
                          str(_write_operators(pki.folder, "spiffe://example.org/ns/ops/sa/oncall")),
                          tls=team_a)
    with client(server, tls=team_a) as a, client(server, tls=team_b) as b, \
            client(server, tls=ops) as operator:
        a.create("of-a", rotate_pipeline(str(image_root / "imgs")))
        with pytest.raises(errors.PermissionDenied, match="'b.ml.svc' may not describe"):
            b.pipeline("of-a")
        assert [p.name for p in b.pipelines()] == []
        assert [p.name for p in operator.pipelines()] == ["of-a"]
        assert operator.checkpoint("of-a").batches == 0


def _write_operators(folder: Path, *names: str) -> Path:
    path = folder / "operators.yaml"
    path.write_text("auth:\n  operators: [" + ", ".join(f'"{n}"' for n in names) + "]\n")
    return path


def test_rotated_certificate_files_serve_new_connections(
        start_server: Start, pki: Pki, image_root: Path) -> None:
    """The files are replaced as a Kubernetes Secret volume does it (a new directory, the
    link swapped): the next connection gets the new certificate (its serial), an open
    connection keeps working, and a half-written pair is not served."""
    live = pki.live_files()
    server = start_server("--tls-cert", str(live / "tls.crt"), "--tls-key",
                          str(live / "tls.key"), tls=pki.plain)
    old_serial = peer_serial("127.0.0.1", server.port, pki.ca_file)
    open_client = client(server, tls=pki.plain)
    pipe = open_client.create("rotating", rotate_pipeline(str(image_root / "imgs")))
    pipe.run()

    renewed = pki.ca.issue("127.0.0.1", "localhost")
    second = pki.folder / "v2"
    second.mkdir()
    renewed.write(second / "tls.crt", second / "tls.key")
    pki.swap_live(second)
    assert renewed.serial != old_serial
    deadline = time.monotonic() + DEADLINE
    while (serial := peer_serial("127.0.0.1", server.port, pki.ca_file)) != renewed.serial:
        assert time.monotonic() < deadline, "the server kept its old certificate"
        time.sleep(0.1)
    assert serial == renewed.serial
    pipe.run()  # the connection opened before the rotation goes on
    with client(server, tls=pki.plain) as fresh:
        assert fresh.pipeline("rotating").sent >= 2
    open_client.close()

    # A certificate whose key does not match (a rotation caught half-way) is not served.
    third = pki.folder / "v3"
    third.mkdir()
    shutil.copy(second / "tls.key", third / "tls.key")
    (third / "tls.crt").write_bytes(pki.ca.issue("127.0.0.1").cert_pem)
    pki.swap_live(third)
    time.sleep(0.2)
    assert peer_serial("127.0.0.1", server.port, pki.ca_file) == renewed.serial
    assert "serving the certificate read before" in server.log()


def test_bad_tls_files_stop_the_server_naming_the_key(pki: Pki, tmp_path: Path) -> None:
    other_key = pki.ca.issue("127.0.0.1").write(tmp_path / "x.pem", tmp_path / "x.key")[1]
    for args, expected in (
            (["--tls-cert", str(pki.cert)], "tls: give cert_file and key_file together"),
            (["--tls-cert", str(pki.cert), "--tls-key", str(other_key)],
             "tls.key_file"),
            (["--tls-cert", str(tmp_path / "absent.pem"), "--tls-key", str(pki.key)],
             "tls.cert_file: cannot read"),
            (["--tls-client-ca", str(pki.ca_file)], "tls.client_ca_file: client certificates "
                                                     "need TLS")):
        done = subprocess.run(
            [sys.executable, "-m", "conveyor_server.app.main", "--host", "127.0.0.1",
             "--port", "0", "--data-root", str(tmp_path), "--redis-url",
             "redis://127.0.0.1:1/0", *args],
            capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 2, done.stderr
        assert expected in done.stderr and "listening" not in done.stdout, done.stderr
