"""Where a pipeline keeps its readers' file listings, by digest (see ``data_identity``).

The engine only needs ``has``, ``get`` and ``put``; the service gives it one backed by
Redis, shared by every server, so a restore anywhere can name the first changed file.
Keeping a listing is best effort: an archive that fails answers "absent".
"""

from __future__ import annotations

from typing import Protocol


class ListingArchive(Protocol):
    def has(self, digest: bytes) -> bool: ...

    def get(self, digest: bytes) -> bytes | None: ...

    def put(self, digest: bytes, listing: bytes) -> None: ...


class MemoryListings:
    """Listings in a dict: for an in-process pipeline and its restores in one process."""

    def __init__(self) -> None:
        self._listings: dict[bytes, bytes] = {}

    def has(self, digest: bytes) -> bool:
        return digest in self._listings

    def get(self, digest: bytes) -> bytes | None:
        return self._listings.get(digest)

    def put(self, digest: bytes, listing: bytes) -> None:
        self._listings[digest] = listing
