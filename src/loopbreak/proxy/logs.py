"""The proxy's log: one JSON object per line, on the ``loopbreak.proxy`` logger.

Every line is an event (``trip``, ``tool-denied``, ``stall``, ``monologue``, ``upstream-error``,
``passthrough-broken``, ``config-rejected``, ``config-missing`` at warning or error;
``request``, ``config-reloaded``, ``upstream-dialect`` at info) with its fields; the
command's formatter puts the time and level inside the object, so every line of the proxy's
own log reads as JSON (the start banner and uvicorn's lines stay text: ``grep '^{' | jq``).
No line holds an API key or a prompt: a session is named by a salted hash.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import sys
import time
from typing import Any

log = logging.getLogger("loopbreak.proxy")

# A hash of a prompt without a salt lets anyone holding the log confirm a guessed prompt;
# salted per process, it still ties together the lines of one session in one process.
_SALT = secrets.token_bytes(16)


def event(name: str, level: int = logging.WARNING, **fields: Any) -> None:
    """Log one event as a JSON object."""
    if log.isEnabledFor(level):
        log.log(level, json.dumps({"event": name, **fields}, ensure_ascii=False))


def session_id(value: str) -> str:
    """A short salted hash naming a session in the log (``""`` for none)."""
    if not value:
        return ""
    digest = hashlib.blake2b(value.encode("utf-8", "surrogatepass"), key=_SALT, digest_size=6)
    return digest.hexdigest()


class JsonLineFormatter(logging.Formatter):
    """A record whose message is a JSON object gains ``time`` and ``level`` inside it;
    any other message becomes ``{"time", "level", "logger", "message"}``."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        head = {"time": f"{stamp}.{int(record.msecs):03d}Z", "level": record.levelname.lower()}
        message = record.getMessage()
        try:
            fields = json.loads(message)
        except ValueError:
            fields = None
        if not isinstance(fields, dict):
            fields = {"logger": record.name, "message": message}
        if record.exc_info:
            fields["error"] = self.formatException(record.exc_info).splitlines()[-1]
        return json.dumps({**head, **fields}, ensure_ascii=False)


def configure_logging(level: str) -> None:
    """The proxy's own lines as one JSON object each (``jq`` reads them), everything else
    (uvicorn) as text; both on stderr."""
    logging.basicConfig(stream=sys.stderr, level=level.upper(),
                        format="%(asctime)s %(name)s %(message)s")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLineFormatter())
    ours = logging.getLogger("loopbreak")
    ours.handlers[:] = [handler]
    ours.setLevel(level.upper())
    ours.propagate = False
