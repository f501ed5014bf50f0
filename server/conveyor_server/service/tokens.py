"""Bearer tokens by identity: ``Tokens`` looks a presented token up, and reads its file
again when the file changes.

The file (``auth.tokens_file``) is YAML, one ``name: token`` entry per identity::

    team-vision: 3q2+7w...      # at least 16 characters each
    team-speech: Zm9vYmFy...
    ops: c2VjcmV0...            # list it under auth.operators to act on every pipeline

Several names let the server tell callers apart (a pipeline records its creator). Every
lookup compares the SHA-256 of the presented token with that of every entry using
``hmac.compare_digest``, so neither the time taken nor an early exit tells which entry, or
how much of a token, matched. Errors name the file and the entry, never a token.

A rotated file (a Kubernetes Secret updated in place) is picked up within
``RECHECK_S``: its metadata is looked at no more often than that, and a changed file is
read again. A file that became unreadable or invalid keeps the tokens read before, and
says why in the log once per change.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import yaml

from conveyor.errors import InvalidArgument
from conveyor_server.store.store import ANONYMOUS

log = logging.getLogger("conveyor.server")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,127}$")
#: The shortest token accepted: guessing one must not be practical.
MIN_TOKEN_CHARS = 16
#: How often the file's metadata is looked at, at most (seconds).
RECHECK_S = 1.0


class TokenFileError(InvalidArgument):
    """The tokens file cannot be used; the message names the file and the entry."""


def check_identity(name: str, where: str) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise TokenFileError(f"{where}: identity {name!r} is invalid: use 1-128 characters "
                             "from A-Z a-z 0-9 . _ : @ / + - starting with a letter or digit")
    return name


def parse_tokens(text: str, where: str) -> dict[str, str]:
    """``name -> token`` from the file's text; ``TokenFileError`` naming ``where`` and the
    entry (never the token) when an entry is not usable."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        raise TokenFileError(f"{where}: not valid YAML") from None
    if not isinstance(data, dict) or not data:
        raise TokenFileError(f"{where}: expected a mapping of 'name: token' entries, one per "
                             "identity")
    tokens: dict[str, str] = {}
    owners: dict[str, str] = {}
    for name, token in data.items():
        check_identity(str(name) if isinstance(name, int) else name, where)
        if name == ANONYMOUS:
            raise TokenFileError(f"{where}: {ANONYMOUS!r} is reserved for callers without "
                                 "credentials (authentication off, loopback clients)")
        if not isinstance(token, str) or not token.strip():
            raise TokenFileError(f"{where}: entry {name!r}: the token must be a non-empty "
                                 "string")
        token = token.strip()
        if len(token) < MIN_TOKEN_CHARS:
            raise TokenFileError(f"{where}: entry {name!r}: the token has {len(token)} "
                                 f"characters, at least {MIN_TOKEN_CHARS} are required")
        if token in owners:
            raise TokenFileError(f"{where}: entries {owners[token]!r} and {name!r} have the "
                                 "same token: each identity needs its own")
        owners[token] = str(name)
        tokens[str(name)] = token
    return tokens


def _digest(token: str | bytes) -> bytes:
    return hashlib.sha256(token.encode() if isinstance(token, str) else token).digest()


def _signature(path: Path) -> tuple[int, int, int, int] | None:
    """What changes when the file is replaced or rewritten (None: it cannot be read)."""
    try:
        st = os.stat(path)  # follows the symlinks a Kubernetes Secret volume swaps
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class Tokens:
    """The tokens of ``path`` (if any) plus ``fixed`` ones (name -> token), looked up in
    constant time per entry. An identity may have several tokens."""

    def __init__(self, path: str | Path | None = None,
                 fixed: Mapping[str, str] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._fixed = list((fixed or {}).items())
        self._lock = threading.Lock()
        self._from_file: dict[str, str] = {}
        self._signature: tuple[int, int, int, int] | None = None
        self._checked = 0.0
        self._entries: tuple[tuple[str, bytes], ...] = ()
        if self.path is not None:
            self._from_file = self._read()
        self._rebuild()

    def _read(self) -> dict[str, str]:
        assert self.path is not None
        where = f"auth.tokens_file {str(self.path)!r}"
        self._signature = _signature(self.path)
        try:
            text = self.path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise TokenFileError(f"{where}: cannot read it: "
                                 f"{getattr(exc, 'strerror', None) or exc}") from None
        return parse_tokens(text, where)

    def _rebuild(self) -> None:
        self._entries = tuple((name, _digest(token))
                              for name, token in [*self._from_file.items(), *self._fixed])

    def names(self) -> list[str]:
        return sorted({name for name, _ in self._entries})

    def add(self, name: str, token: str) -> None:
        """A token for ``name`` kept apart from the file (the server's own, for its
        start-up calls); the identity's other tokens stay valid."""
        with self._lock:
            self._fixed.append((name, token))
            self._rebuild()

    def remove(self, name: str, token: str) -> None:
        with self._lock:
            self._fixed = [entry for entry in self._fixed if entry != (name, token)]
            self._rebuild()

    def identify(self, presented: str | bytes) -> str | None:
        """The identity whose token ``presented`` is, or None."""
        self._reload_if_changed()
        given = _digest(presented)
        found = None
        for name, digest in self._entries:  # every entry, whatever matched
            if hmac.compare_digest(given, digest):
                found = name
        return found

    def _reload_if_changed(self) -> None:
        if self.path is None or time.monotonic() - self._checked < RECHECK_S:
            return
        with self._lock:
            if time.monotonic() - self._checked < RECHECK_S:
                return
            self._checked = time.monotonic()
            signature = _signature(self.path)
            if signature == self._signature:
                return
            try:
                self._from_file = self._read()
            except TokenFileError as exc:
                log.error("%s; keeping the tokens read before", exc.message)
                return
            self._rebuild()
            log.info("read the tokens file %s again: %d identities", self.path,
                     len(self._from_file))
