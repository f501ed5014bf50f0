"""Pipeline names and checkpoint ids: their forms, and the check digits of an id.

A checkpoint id is ``<pipeline>:<seq>-<nonce>``; the nonce is 12 random hex digits drawn
for the write and 4 check digits (``sealed_nonce``, computed alike by
``scripts/write_checkpoint.lua``), so an id no server wrote (mistyped, made up) is told
from a real one whose number was reused, retired or lost. Ids ``<pipeline>:<seq>`` are an
older server's, which drew no nonce.
"""

from __future__ import annotations

import hashlib
import re
import secrets

from conveyor.errors import InvalidArgument

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_name(name: str) -> str:
    if not NAME_PATTERN.fullmatch(name or ""):
        raise InvalidArgument(f"pipeline name {name!r} is invalid: use 1-128 characters from "
                              "A-Z a-z 0-9 . _ - starting with a letter or digit")
    return name


CHECKPOINT_ID_PATTERN = re.compile(r"([^:]+):([1-9][0-9]{0,18})(?:-([0-9a-f]{16}))?")


#: Hex digits of a nonce drawn at random; the rest (4) check the id (``sealed_nonce``).
RANDOM_NONCE_DIGITS = 12


def new_nonce() -> str:
    """The random part of a new checkpoint id's nonce: 12 lowercase hex digits."""
    return secrets.token_hex(RANDOM_NONCE_DIGITS // 2)


def sealed_nonce(name: str, seq: int, random_part: str) -> str:
    """The nonce of checkpoint ``seq`` of ``name``: ``random_part`` and 4 check digits, the
    first of SHA-1 of ``<name>:<seq>-<random_part>`` (``write_checkpoint.lua`` computes
    the same). A mistyped or made-up id fails the check (all but 1 in 65,536), so it is
    told from a real id whose number now holds another checkpoint."""
    check = hashlib.sha1(f"{name}:{seq}-{random_part}".encode()).hexdigest()[:4]
    return random_part + check


def written_by_a_server(name: str, seq: int, nonce: str) -> bool:
    """Whether ``nonce`` passes the check a server's nonce carries (``sealed_nonce``)."""
    random_part = nonce[:RANDOM_NONCE_DIGITS]
    return len(nonce) == 16 and sealed_nonce(name, seq, random_part) == nonce


def checkpoint_id(name: str, seq: int, nonce: str) -> str:
    """``<name>:<seq>-<nonce>``; an empty nonce gives an older server's ``<name>:<seq>``."""
    return f"{name}:{seq}-{nonce}" if nonce else f"{name}:{seq}"


def parse_checkpoint_id(cid: str) -> tuple[str, int, str]:
    """(pipeline, sequence, nonce) of a checkpoint id; the nonce is "" for an older
    server's ``<pipeline>:<number>``."""
    match = CHECKPOINT_ID_PATTERN.fullmatch(cid or "")
    if match is None:
        raise InvalidArgument(f"checkpoint id {cid!r} is invalid: expected "
                              "'<pipeline>:<number>-<16 hex>'")
    name, seq, nonce = match.groups()
    return check_name(name), int(seq), nonce or ""
