"""Real redis-servers on loopback TCP in the modes the server supports: TLS (with a
certificate made for the test), a single-node Redis Cluster, and a master watched by one
Sentinel."""

from __future__ import annotations

import functools
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from conveyor_server.store.connect import RedisConfig, TlsConfig
from conveyor_server.store.redis_process import find_redis_server, terminate


def free_port(below: int = 65536) -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port < below:
            return port


def _wait(check: Callable[[], bool], what: str, log: Path, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (redis.RedisError, OSError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{what} not ready in {timeout}s:\n"
                       f"{log.read_text(errors='replace')[-2000:] if log.exists() else ''}")


@dataclass
class RedisMode:
    """Processes of one mode and the configuration that reaches them."""
    name: str
    config: RedisConfig
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def stop(self) -> None:
        for proc in self.procs:
            terminate(proc, 5)


def _spawn(directory: Path, name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    log = directory / f"{name}.log"
    proc = subprocess.Popen([find_redis_server(), *args, "--dir", str(directory),
                             "--logfile", str(log), "--save", "", "--appendonly", "no"],
                            stdin=subprocess.DEVNULL)
    return proc, log


class ModeUnsupported(RuntimeError):
    """This redis-server build cannot run the mode (e.g. built without TLS)."""


def start_tls(directory: Path) -> RedisMode:
    import trustme

    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1", "localhost")
    client_cert = ca.issue_cert("conveyor-client")
    files = {"ca": directory / "ca.pem", "server": directory / "server.pem",
             "server_key": directory / "server.key", "client": directory / "client.pem",
             "client_key": directory / "client.key"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    server_cert.cert_chain_pems[0].write_to_path(str(files["server"]))
    server_cert.private_key_pem.write_to_path(str(files["server_key"]))
    client_cert.cert_chain_pems[0].write_to_path(str(files["client"]))
    client_cert.private_key_pem.write_to_path(str(files["client_key"]))
    port = free_port()
    proc, log = _spawn(directory, "tls", "--port", "0", "--bind", "127.0.0.1",
                       "--tls-port", str(port), "--tls-cert-file", str(files["server"]),
                       "--tls-key-file", str(files["server_key"]),
                       "--tls-ca-cert-file", str(files["ca"]), "--tls-auth-clients", "yes")
    time.sleep(0.2)
    if proc.poll() is not None:
        raise ModeUnsupported(f"{find_redis_server()} refused the TLS options (built without "
                              f"TLS?): {log.read_text(errors='replace')[-500:]}")
    tls = TlsConfig(ca_file=str(files["ca"]), cert_file=str(files["client"]),
                    key_file=str(files["client_key"]))
    cfg = RedisConfig(url=f"rediss://127.0.0.1:{port}/0", tls=tls)
    client: Any = redis.Redis(host="127.0.0.1", port=port, ssl=True,
                              ssl_ca_certs=tls.ca_file, ssl_certfile=tls.cert_file,
                              ssl_keyfile=tls.key_file, socket_timeout=1)
    _wait(client.ping, "redis-server with TLS", log)
    client.close()
    return RedisMode("tls", cfg, [proc])


def start_cluster(directory: Path) -> RedisMode:
    # The cluster bus listens on port + 10000 unless told otherwise: name both.
    port, bus = free_port(below=55536), free_port()
    proc, log = _spawn(directory, "cluster", "--port", str(port), "--bind", "127.0.0.1",
                       "--cluster-enabled", "yes", "--cluster-port", str(bus),
                       "--cluster-config-file", str(directory / "nodes.conf"))
    client: Any = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1)
    _wait(client.ping, "redis-server in cluster mode", log)
    client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
    _wait(lambda: b"cluster_state:ok" in client.execute_command("CLUSTER", "INFO"),
          "the single-node cluster", log)
    client.close()
    return RedisMode("cluster", RedisConfig(url=f"redis://127.0.0.1:{port}/0", mode="cluster"),
                     [proc])


def start_sentinel(directory: Path) -> RedisMode:
    master_port, sentinel_port = free_port(), free_port()
    master, log = _spawn(directory, "master", "--port", str(master_port), "--bind", "127.0.0.1")
    client: Any = redis.Redis(host="127.0.0.1", port=master_port, socket_timeout=1)
    _wait(client.ping, "the master", log)
    client.close()
    conf = directory / "sentinel.conf"
    conf.write_text(f"port {sentinel_port}\nbind 127.0.0.1\n"
                    f"sentinel monitor conveyor-master 127.0.0.1 {master_port} 1\n"
                    "sentinel down-after-milliseconds conveyor-master 5000\n")
    log = directory / "sentinel.log"
    sentinel = subprocess.Popen([find_redis_server(), str(conf), "--sentinel", "--dir",
                                 str(directory), "--logfile", str(log)],
                                stdin=subprocess.DEVNULL)
    watcher: Any = redis.Redis(host="127.0.0.1", port=sentinel_port, socket_timeout=1)
    _wait(lambda: watcher.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME",
                                          "conveyor-master") is not None, "the sentinel", log)
    watcher.close()
    cfg = RedisConfig(mode="sentinel", sentinels=(f"127.0.0.1:{sentinel_port}",),
                      master_name="conveyor-master")
    return RedisMode("sentinel", cfg, [sentinel, master])


STARTERS = {"tls": start_tls, "cluster": start_cluster, "sentinel": start_sentinel}


@dataclass
class ReplicatedRedis:
    """A primary with replicas, watched by Sentinels that agree (a quorum of two) and
    fail over within about a second of the primary going silent."""
    master_name: str
    ports: list[int]
    sentinel_ports: list[int]
    procs: dict[int, subprocess.Popen[bytes]]
    logs: Path

    def config(self, **options: Any) -> RedisConfig:
        return RedisConfig(mode="sentinel", master_name=self.master_name,
                           sentinels=tuple(f"127.0.0.1:{p}" for p in self.sentinel_ports),
                           **options)

    def primary_port(self) -> int:
        """The primary's port as the first Sentinel names it."""
        client: Any = redis.Redis(host="127.0.0.1", port=self.sentinel_ports[0],
                                  socket_timeout=1)
        try:
            return int(client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME",
                                              self.master_name)[1])
        finally:
            client.close()

    def kill_primary(self) -> int:
        """kill -9 the primary (no warning to anyone); returns its port."""
        port = self.primary_port()
        self.procs[port].kill()
        self.procs[port].wait(10)
        return port

    def switch_over(self) -> int:
        """Ask the Sentinels for a failover (``SENTINEL FAILOVER``: the primary stays up and
        is demoted to a replica); returns the primary's port before it."""
        port = self.primary_port()
        client: Any = redis.Redis(host="127.0.0.1", port=self.sentinel_ports[0],
                                  socket_timeout=1)
        try:
            client.execute_command("SENTINEL", "FAILOVER", self.master_name)
        finally:
            client.close()
        return port

    def promoted(self, old: int) -> bool:
        """Whether every Sentinel names a primary other than ``old``."""
        for port in self.sentinel_ports:
            client: Any = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1)
            try:
                addr = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME",
                                              self.master_name)
            finally:
                client.close()
            if int(addr[1]) == old:
                return False
        return True

    def wait_promoted(self, old: int, timeout: float = 30.0) -> int:
        """The new primary's port once every Sentinel names one other than ``old`` and it
        says it is the primary."""
        def promoted() -> bool:
            if not self.promoted(old):
                return False
            new: Any = redis.Redis(host="127.0.0.1", port=self.primary_port(),
                                   socket_timeout=1)
            try:
                return bool(new.info("replication")["role"] == "master")
            finally:
                new.close()
        _wait(promoted, "a Sentinel failover", self.logs / "sentinel-0.log", timeout)
        return self.primary_port()

    def stop(self) -> None:
        for proc in self.procs.values():
            terminate(proc, 5)


def _following(client: Any) -> bool:
    return bool(client.info("replication")["master_link_status"] == "up")


def start_replicated(directory: Path, replicas: int = 2, sentinels: int = 3,
                     name: str = "conveyor-primary") -> ReplicatedRedis:
    """Start a primary, ``replicas`` replicas following it and ``sentinels`` Sentinels
    (quorum 2; ``down-after-milliseconds`` 500), waiting until every Sentinel sees every
    replica and the other Sentinels, so a failover can start at once."""
    directory.mkdir(parents=True, exist_ok=True)
    procs: dict[int, subprocess.Popen[bytes]] = {}
    started = ReplicatedRedis(name, [], [], procs, directory)
    try:
        primary = free_port()
        for i in range(replicas + 1):
            port = primary if i == 0 else free_port()
            follow = [] if i == 0 else ["--replicaof", "127.0.0.1", str(primary)]
            procs[port], log = _spawn(directory, f"redis-{i}", "--port", str(port),
                                      "--bind", "127.0.0.1", *follow)
            client: Any = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1)
            _wait(client.ping, f"redis-server {i}", log)
            if i:
                _wait(functools.partial(_following, client),
                      f"replica {i} to follow the primary", log)
            client.close()
            started.ports.append(port)
        for i in range(sentinels):
            port = free_port()
            conf = directory / f"sentinel-{i}.conf"
            conf.write_text(f"port {port}\nbind 127.0.0.1\n"
                            f"sentinel monitor {name} 127.0.0.1 {primary} 2\n"
                            f"sentinel down-after-milliseconds {name} 500\n"
                            f"sentinel failover-timeout {name} 3000\n"
                            f"sentinel parallel-syncs {name} {replicas}\n")
            log = directory / f"sentinel-{i}.log"
            procs[port] = subprocess.Popen(
                [find_redis_server(), str(conf), "--sentinel", "--dir", str(directory),
                 "--logfile", str(log)], stdin=subprocess.DEVNULL)
            started.sentinel_ports.append(port)
        for i, port in enumerate(started.sentinel_ports):
            watcher: Any = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1)

            def ready(watcher: Any = watcher) -> bool:
                fields = watcher.sentinel_master(name)
                return (int(fields["num-slaves"]) == replicas
                        and int(fields["num-other-sentinels"]) == sentinels - 1)
            _wait(ready, f"sentinel {i} to see the replicas and the other sentinels",
                  directory / f"sentinel-{i}.log", 30)
            watcher.close()
    except BaseException:
        started.stop()
        raise
    return started
