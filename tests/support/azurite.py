"""A real Azure Blob Storage server for the tests: Azurite (npm's ``azurite``, which
``make test`` installs into ``.venv/azurite``) on loopback.

``AzuriteProcess`` runs ``azurite-blob`` on a free port, keeping blobs in memory, with
Azurite's one account (``devstoreaccount1`` and its published key: no secret). Clients
reach it through Azure's standard environment: ``AZURE_STORAGE_USE_EMULATOR`` and
``AZURITE_BLOB_STORAGE_URL`` (``env``), or an account name and key with the server's URL
as the endpoint (``account_env``, ``endpoint``). A container is created with a request
signed here with the account's key (Shared Key), which obstore cannot make; ``sas`` signs
an account SAS with the permissions asked for. It waits for the server to answer (no
fixed sleep) and is killed at the end.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import shutil
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import obstore
from obstore.store import AzureStore

from tests.support.seaweed import free_ports
from tests.support.store_process import StoreProcess, answers, tree_objects

ACCOUNT = "devstoreaccount1"
#: Azurite's published key of its account.
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
START_TIMEOUT = 60.0
_VERSION = "2021-08-06"


def find_azurite() -> str:
    """``azurite-blob`` on PATH, else the one ``make test`` installs beside this venv."""
    found = shutil.which("azurite-blob")
    if found is not None:
        return found
    bundled = Path(sys.prefix) / "azurite" / "node_modules" / ".bin" / "azurite-blob"
    if bundled.exists():
        return str(bundled)
    raise RuntimeError(f"no azurite-blob: `make test` installs it (npm install --prefix "
                       f"{Path(sys.prefix) / 'azurite'} azurite@3.35.0; Node 20 or later)")


def _sign(string_to_sign: str) -> str:
    digest = hmac.new(base64.b64decode(KEY), string_to_sign.encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


class AzuriteProcess(StoreProcess):
    def __init__(self, directory: Path) -> None:
        super().__init__(directory, "azurite", "azurite.log")
        (self.port,) = free_ports(1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def endpoint(self) -> str:
        """The account's blob service URL (Azure's ``https://ACCOUNT.blob.core.windows.net``)."""
        return f"{self.url}/{ACCOUNT}"

    def env(self) -> dict[str, str]:
        """The standard Azure environment of a client of this emulator."""
        return {"AZURE_STORAGE_USE_EMULATOR": "true", "AZURITE_BLOB_STORAGE_URL": self.url}

    def account_env(self) -> dict[str, str]:
        """The standard Azure environment of a client of an account (with ``endpoint``)."""
        return {"AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT, "AZURE_STORAGE_ACCOUNT_KEY": KEY}

    def start(self) -> AzuriteProcess:
        args = [find_azurite(), "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
                "--inMemoryPersistence", "--disableTelemetry", "--skipApiVersionCheck"]
        listing = f"{self.endpoint}?comp=list"  # answered 403 (not signed) once it serves
        self.launch(args, START_TIMEOUT, (listing, lambda: answers(listing)))
        return self

    def create_container(self, container: str) -> None:
        """Azure's Create Container, signed with the account's key (Shared Key)."""
        headers = {"x-ms-date": email.utils.formatdate(usegmt=True), "x-ms-version": _VERSION}
        content_type = "application/octet-stream"
        canonical = "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()))
        # VERB, then Content-Encoding, -Language, -Length, -MD5, -Type, Date,
        # If-Modified-Since, If-Match, If-None-Match, If-Unmodified-Since and Range.
        fields = ["PUT", "", "", "", "", content_type, "", "", "", "", "", ""]
        resource = f"/{ACCOUNT}/{ACCOUNT}/{container}\nrestype:container"
        signature = _sign("\n".join(fields) + "\n" + canonical + resource)
        request = urllib.request.Request(
            f"{self.endpoint}/{container}?restype=container", data=b"", method="PUT",
            headers={**headers, "Content-Type": content_type,
                     "Authorization": f"SharedKey {ACCOUNT}:{signature}"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 201, answer.status

    def sas(self, permissions: str) -> str:
        """An account SAS for blobs (``r``: read, ``l``: list, ...), valid for a day."""
        expiry = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 86400))
        fields = {"sv": "2020-08-04", "ss": "b", "srt": "sco", "sp": permissions,
                  "se": expiry, "spr": "https,http"}
        signature = _sign("\n".join([ACCOUNT, fields["sp"], fields["ss"], fields["srt"], "",
                                     fields["se"], "", fields["spr"], fields["sv"], ""]))
        return urllib.parse.urlencode(fields | {"sig": signature})

    def store(self, container: str) -> AzureStore:
        return AzureStore(container, account_name=ACCOUNT, account_key=KEY,
                          endpoint=self.endpoint, client_options={"allow_http": True})

    def put(self, container: str, key: str, data: bytes) -> None:
        obstore.put(self.store(container), key, data)

    def upload_tree(self, container: str, folder: Path, prefix: str) -> None:
        """Every file below ``folder`` as ``prefix/relative/path``."""
        store = self.store(container)
        for key, data in tree_objects(folder, prefix):
            obstore.put(store, key, data)

    def delete(self, container: str, key: str) -> None:
        obstore.delete(self.store(container), key)
