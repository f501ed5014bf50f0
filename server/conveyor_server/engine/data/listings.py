"""Where a pipeline keeps its readers' file listings, by digest (see ``data_identity``).

The engine only needs ``has``, ``get`` and ``put``; the service gives it one backed by
Redis, shared by every server, so a restore anywhere can name the first changed file.
Keeping a listing is best effort: an archive that fails answers "absent".
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class ListingArchive(Protocol):
    def has(self, digest: bytes) -> bool: ...

    def get(self, digest: bytes) -> bytes | None: ...

    def put(self, digest: bytes, listing: bytes) -> None: ...


class ListedData(Protocol):
    """A reader's data identity: its digest, its listing, and the first change from an
    earlier listing."""

    @property
    def digest(self) -> bytes: ...

    def listing(self) -> bytes: ...

    def first_change(self, earlier: bytes) -> str | None: ...


def keep_listings(archive: ListingArchive, identities: Iterable[ListedData]) -> None:
    """Keep the listing of each identity the archive does not hold yet."""
    for identity in identities:
        if not archive.has(identity.digest):
            archive.put(identity.digest, identity.listing())


def first_change(archive: ListingArchive, identity: ListedData, earlier: bytes) -> str | None:
    """The first file that changed since the ``earlier`` listing, where the archive has it."""
    listing = archive.get(earlier)
    return None if listing is None else identity.first_change(listing)


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
