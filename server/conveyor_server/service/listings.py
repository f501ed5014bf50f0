"""The engine's file-listing archive, kept in Redis and shared by every server.

Best effort: a listing bigger than ``MAX_LISTING_BYTES``, or one Redis cannot take, is
not kept (logged); a restore over changed data is then refused without naming the file.
"""

from __future__ import annotations

import logging

from conveyor.errors import ConveyorError
from conveyor_server.store.store import Store

log = logging.getLogger("conveyor.server")
MAX_LISTING_BYTES = 64 << 20


class RedisListings:
    def __init__(self, store: Store) -> None:
        self._store = store

    def has(self, digest: bytes) -> bool:
        try:
            return self._store.has_listing(digest)
        except ConveyorError as exc:
            log.warning("could not check a file listing in Redis: %s", exc.message)
            return True  # do not try to write it either

    def get(self, digest: bytes) -> bytes | None:
        try:
            return self._store.get_listing(digest)
        except ConveyorError as exc:
            log.warning("could not read a file listing from Redis: %s", exc.message)
            return None

    def put(self, digest: bytes, listing: bytes) -> None:
        if len(listing) > MAX_LISTING_BYTES:
            log.warning("a file listing of %d bytes is not kept in Redis (limit %d): a "
                        "restore over changed data will not name the changed file",
                        len(listing), MAX_LISTING_BYTES)
            return
        try:
            self._store.put_listing(digest, listing)
        except ConveyorError as exc:
            log.warning("could not keep a file listing in Redis: %s", exc.message)
