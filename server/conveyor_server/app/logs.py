"""The server's log: plain text, or one JSON object per line.

``configure_logging(level, "json")`` writes to stderr lines such as
``{"ts": "2026-01-02T03:04:05.678Z", "level": "INFO", "logger": "conveyor.server",
"msg": "checkpoint rotate:1-9f3c0a1b2c3d4e5f of rotate after batch 3 (507 bytes)",
"pipeline": "rotate", "checkpoint_id": "rotate:1-9f3c0a1b2c3d4e5f", "batches": 3}``: the
fields given with ``extra=`` at the log call (``pipeline``, ``checkpoint_id``, ``batches``,
``peer``, ``error``, ...) become keys.
"""

from __future__ import annotations

import json
import logging
import sys
import time

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ms = int(record.msecs)
        out: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
                  + f".{ms:03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in out:
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def configure_logging(level: str = "INFO", fmt: str = "text") -> None:
    """Send every log record at ``level`` or above to stderr, as ``fmt`` (text or json);
    replaces handlers configured before. ValueError for an unknown format or level."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=numeric, handlers=[handler], force=True)
