"""What the store reads back from Redis: a pipeline's owner record and a stored checkpoint.

``ANONYMOUS`` is the creator of what callers without credentials make (authentication
off, loopback clients), and of owner records and checkpoints written before creators were
recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

ANONYMOUS = "anonymous"


@dataclass(frozen=True)
class Owner:
    holder: str
    instance: str
    generation: int
    fingerprint: str
    keep: int
    latest: int
    #: The newest checkpoint's full id, "" if none.
    latest_id: str
    #: The identity that created the pipeline.
    creator: str = ANONYMOUS
    #: The training run consuming it ("" if none was named).
    run_id: str = ""


@dataclass(frozen=True)
class StoredCheckpoint:
    id: str
    pipeline: str
    batches: int
    created_ms: int
    size: int
    server: str
    generation: int
    blob: bytes | None = None
    #: The pipeline's creator when the checkpoint was written.
    creator: str = ANONYMOUS
    #: The pipeline's run when the checkpoint was written ("" if none).
    run_id: str = ""


def owner_of(name: str, raw: dict[bytes, bytes]) -> Owner | None:
    """The owner record from its hash's fields (None for no record)."""
    if not raw:
        return None
    latest = int(raw.get(b"latest", 0))
    latest_id = raw.get(b"latest_id", b"").decode()
    if latest and not latest_id.startswith(f"{name}:{latest}-"):
        # The newest checkpoint was written by an older server, which keeps no id: it has
        # no nonce, so its id is the older form, '<name>:<seq>'.
        latest_id = f"{name}:{latest}"
    return Owner(
        holder=raw[b"holder"].decode(), instance=raw[b"instance"].decode(),
        generation=int(raw[b"generation"]), fingerprint=raw[b"fingerprint"].decode(),
        keep=int(raw[b"keep"]), latest=latest, latest_id=latest_id if latest else "",
        creator=raw.get(b"creator", ANONYMOUS.encode()).decode(),
        run_id=raw.get(b"run_id", b"").decode())
