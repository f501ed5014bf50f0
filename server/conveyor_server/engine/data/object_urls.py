"""Object storage URLs (``s3://bucket/key``) and what lies beneath an object root.

A URL is parsed once, strictly: the scheme ``s3``, a bucket name as S3 allows it (3 to 63
lowercase letters, digits, dots and hyphens), then a key whose components are neither
empty nor ``.`` or ``..`` (a key is not a path: nothing is resolved, so such a key could
name something the spelling hides). ``gs://`` and ``az://`` are recognised and refused
with the schemes that are served. An object root is a URL whose key is a prefix; a URL is
beneath it when its bucket is the root's and its key is the prefix or continues it after a
``/``, exactly as a file is beneath a folder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from conveyor.errors import InvalidArgument

#: Schemes of object stores, and the ones read.
_OBJECT_SCHEMES = ("s3", "gs", "gcs", "az", "azure", "abfs")
SERVED_SCHEMES = ("s3",)
BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")


@dataclass(frozen=True)
class ObjectUrl:
    scheme: str
    bucket: str
    #: The key (or key prefix) inside the bucket, without a leading or trailing ``/``.
    key: str

    def __str__(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.key}".rstrip("/")

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
    return found is not None and found.group(1).lower() in _OBJECT_SCHEMES


def parse_object_url(text: str, what: str = "path") -> ObjectUrl:
    """``text`` as an ``ObjectUrl``; InvalidArgument naming ``what`` and the fix if it is
    not one that is served."""
    found = _SCHEME.match(text)
    scheme = found.group(1).lower() if found else ""
    if scheme not in SERVED_SCHEMES:
        raise InvalidArgument(
            f"{what} {text!r}: the scheme {scheme + '://' if scheme else '(none)'} is not "
            f"served; object storage is read through {', '.join(s + '://' for s in SERVED_SCHEMES)}"
            " (S3 and S3-compatible stores)")
    rest = text[len(scheme) + 3:]
    bucket, _, key = rest.partition("/")
    if not BUCKET_NAME.fullmatch(bucket) or ".." in bucket:
        raise InvalidArgument(
            f"{what} {text!r}: {bucket!r} is not a bucket name (3 to 63 lowercase letters, "
            "digits, dots and hyphens): write s3://BUCKET/KEY")
    key = key.rstrip("/")
    parts = key.split("/") if key else []
    if any(p in ("", ".", "..") for p in parts):
        raise InvalidArgument(
            f"{what} {text!r}: a key with an empty, '.' or '..' component is refused (keys "
            "are not resolved like paths): spell the key as stored")
    if any(ord(c) < 0x20 or c == "\x7f" for c in key):
        raise InvalidArgument(f"{what} {text!r}: a key with a control character is refused")
    return ObjectUrl(scheme, bucket, key)
