"""What went wrong with an object storage request, and the error a caller raises for it.

obstore raises its own exceptions, some with the store's answer only in their text (a
listing of a missing bucket is a generic error holding ``NoSuchBucket``). ``classify``
sorts them into kinds once, the same for every store (S3, Google Cloud Storage, Azure Blob
Storage: each answer's words are listed); ``argument_error`` (an argument of a spec names
the object: the pipeline is not built) and ``read_error`` (a listed object cannot be read
as listed: the reader's ``on_error`` applies) make the ``conveyor.errors`` type each kind
calls for, with the bucket (an Azure container) or key and the next step. The store's
text, which holds the endpoint's address, goes to no client; it is logged with any
signature a URL's query holds (an Azure SAS, a presigned URL) blanked.
"""

from __future__ import annotations

import logging
import re

from obstore.exceptions import (
    NotFoundError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
)

from conveyor.errors import (
    ConveyorError,
    DataFileError,
    InvalidArgument,
    PermissionDenied,
    ResourceExhausted,
    Unavailable,
)
from conveyor_server.engine.data.object_urls import ObjectUrl

log = logging.getLogger("conveyor.engine")

#: Words of a store's answer, by kind (first match wins). A missing bucket: S3's and GCS's
#: NoSuchBucket, Azure's ContainerNotFound, and the 500 of GCS's emulator (fake-gcs-server)
#: on a listing.
_SIGNS = (
    ("no_bucket", ("NoSuchBucket", "ContainerNotFound", "no bucket named")),
    ("denied", ("AccessDenied", "403 Forbidden", "InvalidAccessKeyId", "SignatureDoesNotMatch",
                "401 Unauthorized", "ExpiredToken", "InvalidToken", "AuthorizationFailure",
                "AuthenticationFailed", "AuthorizationPermissionMismatch")),
    ("missing", ("NoSuchKey", "BlobNotFound", "404 Not Found")),
    ("changed", ("412 Precondition Failed", "PreconditionFailed", "ConditionNotMet")),
    ("http_refused", ("builder error", "URL scheme is not allowed")),
    ("transient", ("SlowDown", "status code: 5", "error sending request", "connection",
                   "Connection", "timed out", "TimedOut", "operation timed out", "reset by peer",
                   "incomplete message", "IncompleteMessage", "Broken pipe", "body error",
                   "error decoding response body")),
)

_CAUSES = {
    "no_bucket": "the {holder} does not exist",
    "denied": "access denied",
    "missing": "no such key",
    "changed": "the object changed since it was listed (another ETag or version)",
    "http_refused": "plain http to the endpoint is not allowed",
    "transient": "the store did not answer",
}
#: Who reads a store (for "give ... access"), and the setting that allows plain http to it.
_IDENTITY = {"s3": "its AWS credentials, role or service account",
             "gs": "its Google service account",
             "az": "its Azure identity: account key, SAS or workload identity"}
_GRANT = {"s3": "read and list access", "gs": "read and list access (roles/storage.objectViewer)",
          "az": "read and list access (Storage Blob Data Reader)"}
_ALLOW_HTTP = {"s3": "allow_http in the server's object_storage configuration",
               "gs": "object_storage.gcs.allow_http in the server's configuration",
               "az": "object_storage.azure.allow_http in the server's configuration"}
#: A query parameter that holds a signature or a token (blanked in what is logged).
_SECRET_QUERY = re.compile(
    r"((?:sig|signature|x-amz-signature|x-amz-security-token|x-goog-signature|token)=)[^&\s]*",
    re.IGNORECASE)
#: The error code in a store's XML answer (S3, GCS and Azure all answer so).
_STORE_CODE = re.compile(r"<Code>([A-Za-z0-9]{1,100})</Code>")


def blank_secrets(text: str) -> str:
    """``text`` with the value of every query parameter that may hold a credential blanked."""
    return _SECRET_QUERY.sub(r"\1...", text)


class ObjectStoreFailure(Exception):
    """A request failed: ``kind`` is one of ``_CAUSES``' keys, "too_many" or "other"."""

    def __init__(self, kind: str, url: ObjectUrl, detail: str = "", retries: int = 0) -> None:
        super().__init__(f"{kind}: {url}: {detail}")
        self.kind = kind
        self.url = url
        self.detail = detail
        self.retries = retries

    @property
    def transient(self) -> bool:
        return self.kind == "transient"

    @property
    def cause(self) -> str:
        """The failure in words, for a client."""
        said = _CAUSES[self.kind].format(holder=self.url.holder) if self.kind in _CAUSES \
            else self.detail or "the request failed"
        if self.kind == "transient" and self.retries:
            said += f" after {self.retries} retries"
        return said


def classify(exc: BaseException, url: ObjectUrl, attempt: int = 0) -> ObjectStoreFailure:
    """The failure ``exc`` (raised by obstore) stands for; logged with the store's text."""
    if isinstance(exc, ObjectStoreFailure):
        return exc
    if isinstance(exc, ConveyorError):  # raised before any request (a refused endpoint)
        raise exc
    text = str(exc)
    kind = "other"
    if isinstance(exc, (PermissionDeniedError, UnauthenticatedError)):
        kind = "denied"
    elif isinstance(exc, PreconditionError):
        kind = "changed"
    else:
        for name, signs in _SIGNS:
            if any(sign in text for sign in signs):
                kind = name
                break
        else:
            if isinstance(exc, (NotFoundError, FileNotFoundError)):
                kind = "missing"
    detail = blank_secrets(text.splitlines()[0])[:300] if text else type(exc).__name__
    if code := _STORE_CODE.search(text):  # the store's word for it, on a line of its own
        detail += f" ({code.group(1)})"
    log.info("object storage request for %s failed (%s, attempt %d): %s", url, kind,
             attempt + 1, detail)
    return ObjectStoreFailure(kind, url, "" if kind != "other" else type(exc).__name__,
                              attempt)


def argument_error(failure: ObjectStoreFailure, op: str, what: str) -> ConveyorError:
    """The error for ``what`` (an argument naming ``failure.url``) that cannot be listed
    or read while the pipeline is built."""
    url = failure.url
    named = f"{op}: {what} {str(url)!r}"
    kind = failure.kind
    holder = url.holder
    if kind == "no_bucket":
        return InvalidArgument(f"{named}: the {holder} {url.bucket!r} does not exist: check the "
                               f"{holder}'s name and the server's endpoint", bucket=url.bucket)
    if kind == "missing":
        return InvalidArgument(f"{named} does not exist (no object has key {url.key!r}): check "
                               "the key", bucket=url.bucket, key=url.key)
    if kind == "denied":
        return PermissionDenied(
            f"{named}: access denied by the store for {holder} {url.bucket!r}: give the "
            f"server's identity ({_IDENTITY[url.scheme]}) {_GRANT[url.scheme]} to it",
            bucket=url.bucket)
    if kind == "http_refused":
        return InvalidArgument(f"{named}: {failure.cause}: set {_ALLOW_HTTP[url.scheme]} or "
                               "use https", bucket=url.bucket)
    if kind == "too_many":
        return ResourceExhausted(f"{named} holds {failure.detail}, more than a pipeline may "
                                 "list: name a narrower prefix", bucket=url.bucket)
    if kind == "transient":
        return Unavailable(f"{named}: {failure.cause}: check that the store is up and "
                           "reachable from the server, then retry", bucket=url.bucket)
    return InvalidArgument(f"{named} cannot be read ({failure.cause})", bucket=url.bucket)


def read_error(failure: ObjectStoreFailure, op: str, name: str) -> DataFileError:
    """The error for a listed object (named ``name``) that cannot be read as listed."""
    url = failure.url
    step = {"missing": "it was removed since the pipeline listed it",
            "changed": "the data set changed under the pipeline",
            "denied": f"give the server's identity read access to the {url.holder}",
            "transient": "check the store's health; the pipeline can be resumed from its "
                         "last checkpoint"}.get(failure.kind, "check the object")
    return DataFileError(f"{op}: cannot read {name!r} ({url.holder} {url.bucket!r}, key "
                         f"{url.key!r}): {failure.cause}: {step}", bucket=url.bucket,
                         key=url.key)
