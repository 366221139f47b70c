"""Logging set-up: human text or JSON lines, with a filter that blanks anything that looks like a
secret (64-hex tokens, Bearer values) as a last line of defence — code never logs secrets on purpose."""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime

_SECRETISH = re.compile(r"(?i)(bearer\s+)?\b[0-9a-f]{64}\b")


def redact(text: str) -> str:
    """Replace 64-hex runs (tokens, secrets) and Bearer values with ``***``."""
    return _SECRETISH.sub("***", text)


class RedactingFilter(logging.Filter):
    """Rewrites each record's message with :func:`redact` before any handler sees it."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact(record.getMessage())
        record.args = None
        if record.exc_info:
            # Tracebacks can quote request bytes (parser errors); format them here so they pass
            # through the same redaction as the message.
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts`` (UTC), ``level``, ``logger``, ``msg`` and any ``extra`` fields
    named in ``record.fields``."""

    def format(self, record: logging.LogRecord) -> str:
        data = {
            "ts": datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            data.update(fields)
        if record.exc_info:
            data["exc"] = redact(self.formatException(record.exc_info))
        elif record.exc_text:
            data["exc"] = record.exc_text
        return json.dumps(data, ensure_ascii=False)


def setup_logging(fmt: str = "text", level: str = "INFO") -> None:
    """Configure the root logger once (stderr)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RedactingFilter())
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
