"""What the tests' real object store servers (SeaweedFS, fake-gcs-server, Azurite) share.

``StoreProcess`` runs a server's program from a folder of its own, its output appended to
a log file there, and waits until it is ready: it polls readiness checks in turn (no fixed
sleep) and raises, naming the program and its log, if the program exits first or a check
is not met in time (killing it). ``kill`` ends it, as leaving a ``with`` block does.
``answers`` is the readiness check of an HTTP server; ``tree_objects`` the objects a
folder's upload writes.
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Self

#: A readiness check: what it waits for (named in the error if not met in time), and the test.
Check = tuple[str, Callable[[], bool]]


class StoreProcess:
    def __init__(self, directory: Path, program: str, log_name: str) -> None:
        """``program``: the server's name in errors; ``log_name``: its log file's, in
        ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.program = program
        self.log = directory / log_name
        self.proc: subprocess.Popen[bytes] | None = None

    def launch(self, args: list[str], timeout: float, *checks: Check) -> None:
        """Run ``args`` and return once each check in turn is true, within ``timeout``
        seconds in all."""
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, cwd=self.directory)
        deadline = time.monotonic() + timeout
        for what, ready in checks:
            while not ready():
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.program} exited ({self.proc.returncode}); see "
                                       f"{self.log}: {self.log.read_text()[-2000:]}")
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"{self.program} did not answer {what} in {timeout} s; "
                                       f"see {self.log}")
                time.sleep(0.05)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


def answers(url: str) -> bool:
    """Whether an HTTP server answers a GET of ``url``: any answer, an error status too (an
    S3 gateway or Azurite refuses a request that is not signed: it serves)."""
    try:
        urllib.request.urlopen(url, timeout=1).close()
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


def tree_objects(folder: Path, prefix: str) -> Iterator[tuple[str, bytes]]:
    """Every file below ``folder`` as an object: its key ``prefix/relative/path`` and its
    bytes (read as it is reached), in the order of the paths."""
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            yield f"{prefix}/{path.relative_to(folder).as_posix()}".strip("/"), path.read_bytes()
