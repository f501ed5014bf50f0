"""Object storage URLs (``s3://bucket/key``, ``gs://bucket/key``, ``az://container/key``)
and what lies beneath an object root.

A URL is parsed once, strictly: one of the schemes read (``SCHEMES``: S3 and S3-compatible
stores, Google Cloud Storage, Azure Blob Storage), a bucket (a container in Azure) named
as that store allows it, then a key whose components are neither empty nor ``.`` or
``..`` (a key is not a path: nothing is resolved, so such a key could name something the
spelling hides). Each object has one spelling: the other names of these stores' schemes
(``gcs://``; ``azure://``, ``abfs://``, ``adl://``, ``wasb://``, ...) are recognised and
refused naming the one to write, so a root and a URL beneath it never differ by spelling
alone. An Azure URL names no storage account: the server has one, from its environment
(``AZURE_STORAGE_ACCOUNT_NAME``). An object root is a URL whose key is a prefix; a URL is
beneath it when its scheme and bucket are the root's and its key is the prefix or
continues it after a ``/``, exactly as a file is beneath a folder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from conveyor.errors import InvalidArgument


@dataclass(frozen=True)
class Scheme:
    """A scheme read, and how its bucket names are spelled."""

    name: str
    #: The store, in words.
    store: str
    #: What holds the objects: "bucket", or "container" (Azure).
    holder: str
    #: The names of holders the store allows (without the length rules of ``_fits``).
    holder_name: re.Pattern[str]
    #: That rule, in words, for a refusal.
    holder_rule: str


SCHEMES = {s.name: s for s in (
    Scheme("s3", "S3", "bucket", re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]"),
           "3 to 63 lowercase letters, digits, dots and hyphens"),
    Scheme("gs", "Google Cloud Storage", "bucket",
           re.compile(r"[a-z0-9][a-z0-9._\-]{1,220}[a-z0-9]"),
           "3 to 63 lowercase letters, digits, hyphens, underscores and dots, up to 222 "
           "with dots"),
    Scheme("az", "Azure Blob Storage", "container",
           re.compile(r"[a-z0-9](?:-?[a-z0-9]){2,62}"),
           "3 to 63 lowercase letters, digits and single hyphens"),
)}
#: The bucket names of S3 (the server's per-bucket settings are S3's).
BUCKET_NAME = SCHEMES["s3"].holder_name
#: Other names of the same stores' schemes, and the one that is read instead.
_OTHER_SPELLINGS = {"gcs": "gs", "azure": "az", "abfs": "az", "abfss": "az", "adl": "az",
                    "wasb": "az", "wasbs": "az"}
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")


@dataclass(frozen=True)
class ObjectUrl:
    scheme: str
    bucket: str
    #: The key (or key prefix) inside the bucket, without a leading or trailing ``/``.
    key: str

    def __str__(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.key}".rstrip("/")

    @property
    def holder(self) -> str:
        """What holds the object, in words: "bucket", or "container" (Azure)."""
        return SCHEMES[self.scheme].holder

    @property
    def store(self) -> str:
        """The scheme and the bucket, ``s3://bucket`` (with the key, the object)."""
        return f"{self.scheme}://{self.bucket}"

    def below(self, name: str) -> ObjectUrl:
        """The URL of ``name`` (a relative key) below this one."""
        return ObjectUrl(self.scheme, self.bucket, f"{self.key}/{name}".strip("/"))

    def relative_to(self, root: ObjectUrl) -> str | None:
        """This URL's key relative to ``root`` ("" for the root itself), or None if it does
        not lie beneath ``root``."""
        if (self.scheme, self.bucket) != (root.scheme, root.bucket):
            return None
        if not root.key:
            return self.key
        if self.key == root.key:
            return ""
        if self.key.startswith(root.key + "/"):
            return self.key[len(root.key) + 1:]
        return None


def is_object_url(text: str) -> bool:
    """Whether ``text`` is spelled as an object store URL (``scheme://``), valid or not."""
    found = _SCHEME.match(text)
    return found is not None and (found.group(1).lower() in SCHEMES
                                  or found.group(1).lower() in _OTHER_SPELLINGS)


def _served() -> str:
    return ", ".join(f"{s.name}://" for s in SCHEMES.values())


def _fits(scheme: Scheme, name: str) -> bool:
    if not scheme.holder_name.fullmatch(name) or ".." in name:
        return False
    if scheme.name == "gs":  # 63 at most, or 222 in dot-separated parts of 63 at most
        return len(name) <= 63 or ("." in name and all(len(p) <= 63 for p in name.split(".")))
    return True


def parse_object_url(text: str, what: str = "path") -> ObjectUrl:
    """``text`` as an ``ObjectUrl``; InvalidArgument naming ``what`` and the fix if it is
    not one that is served."""
    found = _SCHEME.match(text)
    given = found.group(1) if found else ""
    rest = text[len(given) + 3:]
    scheme = SCHEMES.get(given.lower())
    if scheme is None:
        instead = _OTHER_SPELLINGS.get(given.lower())
        if instead == "az":  # abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/KEY and the like
            holder, _, key = rest.partition("/")
            raise InvalidArgument(
                f"{what} {text!r}: objects of Azure Blob Storage are spelled "
                "az://CONTAINER/KEY, the storage account being the server's "
                f"(AZURE_STORAGE_ACCOUNT_NAME): write az://{holder.partition('@')[0]}/{key}")
        if instead is not None:
            raise InvalidArgument(
                f"{what} {text!r}: objects of {SCHEMES[instead].store} are spelled "
                f"{instead}://BUCKET/KEY: write {instead}://{rest}")
        raise InvalidArgument(
            f"{what} {text!r}: the scheme {given + '://' if given else '(none)'} is not "
            f"served; object storage is read through {_served()} (S3 and S3-compatible "
            "stores, Google Cloud Storage, Azure Blob Storage)")
    bucket, _, key = rest.partition("/")
    if not _fits(scheme, bucket):
        raise InvalidArgument(
            f"{what} {text!r}: {bucket!r} is not a {scheme.holder} name of {scheme.store} "
            f"({scheme.holder_rule}): write {scheme.name}://{scheme.holder.upper()}/KEY")
    key = key.rstrip("/")
    parts = key.split("/") if key else []
    if any(p in ("", ".", "..") for p in parts):
        raise InvalidArgument(
            f"{what} {text!r}: a key with an empty, '.' or '..' component is refused (keys "
            "are not resolved like paths): spell the key as stored")
    if any(ord(c) < 0x20 or c == "\x7f" for c in key):
        raise InvalidArgument(f"{what} {text!r}: a key with a control character is refused")
    return ObjectUrl(scheme.name, bucket, key)
