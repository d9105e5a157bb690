"""`chatgql serve | migrate | relay | consume | webhooks | erase-user | retention run | reports | ban | unban |
documents load | token |
export-schema`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..db import datadir
from ..settings import Settings, load_settings
from . import logs

if TYPE_CHECKING:
    from ..db import Database
    from ..services.erase import Batch


def _settings(**overrides: object) -> Settings:
    try:
        return load_settings(**overrides)
    except ValidationError as error:
        for problem in error.errors():
            print(f"chatgql: configuration error: {problem['msg']}", file=sys.stderr)
        raise SystemExit(2) from None


def serve(args: argparse.Namespace) -> None:
    import uvicorn

    from .app import create_app, keep_startup_objects_out_of_gc
    from .httpprotocol import uvicorn_options

    overrides: dict[str, object] = {}
    if args.no_relay:
        overrides["run_relay"] = False
    if args.no_consumer:
        overrides["run_consumer"] = False
    if args.no_webhooks:
        overrides["run_webhooks"] = False
    if args.workers is not None:
        overrides["workers"] = args.workers
    if args.host:
        overrides["host"] = args.host
    if args.port:
        overrides["port"] = args.port
    settings = _settings(**overrides)
    server_options: dict[str, Any] = dict(
        host=args.host or settings.host,
        port=args.port or settings.port,
        loop="uvloop",
        log_level=args.log_level,
        access_log=settings.access_log_enabled,
        # httptools with header and body deadlines, the connection cap; websockets-sansio, lighter
        # per idle connection and bounded (websocket.py)
        **uvicorn_options(settings),
    )
    if settings.workers == 1:
        with _owning_data_dir(settings):  # refused here, not as a traceback from the lifespan
            app = create_app(settings)
            keep_startup_objects_out_of_gc()
            uvicorn.run(app, **server_options)
        return
    _serve_workers(settings, overrides, server_options)


@contextlib.contextmanager
def _owning_data_dir(settings: Settings) -> Iterator[None]:
    if settings.database_url is not None:
        yield
        return
    datadir.acquire(settings.data_dir)
    try:
        yield
    finally:
        datadir.release(settings.data_dir)


def _serve_workers(settings: Settings, overrides: dict[str, object], server_options: dict[str, Any]) -> None:
    """uvicorn's worker processes, each building the app from the environment, beside the
    supervisor's own runtime (supervisor.py): the database (embedded or not) ready and migrated,
    the hub, the relay and the consumer, all started before any worker."""
    import os

    import uvicorn

    from .. import db
    from .app import running, startup_line
    from .supervisor import Supervisor

    with _owning_data_dir(settings):
        embedded = None
        if settings.database_url is None:
            embedded, url = db.start_embedded_postgres(settings.data_dir)
        else:
            url = settings.database_url.get_secret_value()
        supervisor = None
        try:
            if settings.migrate_on_start:
                asyncio.run(db.upgrade(url))
            supervisor = Supervisor(settings, url, running, embedded=embedded)
            supervisor.start()
            for name, value in overrides.items():
                os.environ[f"CHATGQL_{name.upper()}"] = str(value).lower() if isinstance(value, bool) else str(value)
            os.environ.update(supervisor.worker_environment())
            logging.getLogger("chatgql").info("%s", startup_line(settings))
            uvicorn.run(
                "chatgql.server.app:create_app_from_environment",
                factory=True,
                workers=settings.workers,
                **server_options,
            )
        finally:
            if supervisor is not None:
                supervisor.stop()
            if embedded is not None:
                embedded.cleanup()


async def _run_until_cancelled(settings: Settings) -> None:
    from .app import running

    async with running(settings, api=False):
        await asyncio.Event().wait()


def relay(args: argparse.Namespace) -> None:
    asyncio.run(_run_until_cancelled(_settings(run_relay=True, run_consumer=False, run_webhooks=False)))


def consume(args: argparse.Namespace) -> None:
    settings = _settings(run_relay=False, run_consumer=True, run_webhooks=False)
    if not settings.kafka_bootstrap_servers:
        raise SystemExit("chatgql consume needs CHATGQL_KAFKA_BOOTSTRAP_SERVERS")
    asyncio.run(_run_until_cancelled(settings))


def webhooks(args: argparse.Namespace) -> None:
    """Run only the webhook deliverer; or list the dead letters, or queue them again."""
    settings = _settings(run_relay=False, run_consumer=False, run_webhooks=True)
    if args.action is None:
        if settings.webhook_url is None:
            raise SystemExit("chatgql webhooks needs CHATGQL_WEBHOOK_URL (and CHATGQL_WEBHOOK_SECRET)")
        asyncio.run(_run_until_cancelled(settings))
        return
    if args.action == "replay" and not args.all and not args.ids:
        raise SystemExit("chatgql webhooks replay: give the ids to replay (see `chatgql webhooks dead`) or --all")
    asyncio.run(_dead_letters(settings, args))


async def _dead_letters(settings: Settings, args: argparse.Namespace) -> None:
    from .. import db
    from ..store import webhooks as queue

    async with _database_url(settings) as url:
        if settings.migrate_on_start:
            await db.upgrade(url)
        database = await db.Database(url, max_size=1).open()
        try:
            async with database.connection() as conn:
                if args.action == "replay":
                    count = await queue.replay(conn, None if args.all else args.ids)
                    print(f"queued again: {count}")
                    return
                rows = await queue.dead_letters(conn, args.limit)
        finally:
            await database.close()
    print("id\tconversation\ttype\twebhook-id\tattempts\tdead at\tlast error")
    for row in rows:
        print(
            f"{row.id}\t{row.msg_key}\t{row.type}\tmsg_{row.webhook_id.hex}\t{row.attempts}"
            f"\t{row.dead_at.isoformat()}\t{row.last_error}"
        )


def migrate(args: argparse.Namespace) -> None:
    from .. import db

    settings = _settings()

    async def main() -> None:
        async with _database_url(settings) as url:
            await db.upgrade(url, args.revision)

    asyncio.run(main())


@contextlib.asynccontextmanager
async def _database_url(settings: Settings) -> AsyncIterator[str]:
    """The URL an operator's command works on: the configured database; on the embedded default,
    the server of the process that owns the data directory (a running `chatgql serve`, at the URL
    it published), else the embedded server started for this command and stopped after it."""
    if settings.database_url is not None:
        yield settings.database_url.get_secret_value()
        return
    from .. import db

    server, url = await asyncio.to_thread(db.reach_embedded_postgres, settings.data_dir)
    try:
        yield url
    finally:
        if server is not None:
            await asyncio.to_thread(server.cleanup)


async def _with_database(settings: Settings, work: Callable[[Database], Awaitable[int]]) -> int:
    """work on the operator's database (_database_url), migrated; the relays of other processes
    (a running serve's) are woken for the events it writes."""
    from .. import db
    from ..events.wakeup import RelayWakeup

    async with _database_url(settings) as url:
        if settings.migrate_on_start:
            await db.upgrade(url)
        database = await db.Database(url, max_size=2).open()
        wakeup = RelayWakeup(database)
        try:
            return await work(database)
        finally:
            await wakeup.close()
            await database.close()


def _progress(batch: Batch) -> None:
    print(f"conversation {batch.conversation_id}: {batch.erased} erased ({batch.total} in all)", flush=True)


def _erase(settings: Settings, args: argparse.Namespace, work: Callable[..., Awaitable[int]], *what: object) -> int:
    """work(database, *what, batch_size=, on_batch=) once, printing each batch; returns how many it erased."""
    batch = args.batch or settings.erase_batch_size
    return asyncio.run(_with_database(settings, lambda db: work(db, *what, batch_size=batch, on_batch=_progress)))


def erase_user(args: argparse.Namespace) -> None:
    from ..errors import BadUserInput
    from ..services.checks import check_user_id
    from ..services.erase import erase_user as erase

    settings = _settings()
    try:
        user_id = check_user_id(args.user_id, "USER_ID")
    except BadUserInput as error:
        print(f"chatgql: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"erased {_erase(settings, args, erase, user_id)} messages of user {user_id}")


def retention(args: argparse.Namespace) -> None:
    from ..services.erase import retention_bound, run_retention

    settings = _settings()
    days = args.days or settings.retention_days
    if days is None or days <= 0:
        raise SystemExit("chatgql retention run needs --days (above 0) or CHATGQL_RETENTION_DAYS")
    bound = retention_bound(days)
    print(f"erased {_erase(settings, args, run_retention, bound)} messages sent before {bound.isoformat()}")


def _json(row: Any) -> str:
    import json

    return json.dumps(
        {k: v.isoformat() if isinstance(v, datetime) else v for k, v in dict(row).items()}, ensure_ascii=False
    )


def _until(text: str | None) -> datetime | None:
    """--until: an ISO-8601 time with its offset, in the future."""
    if text is None:
        return None
    try:
        until = datetime.fromisoformat(text)
    except ValueError:
        raise SystemExit(f"chatgql: --until must be an ISO-8601 time, got {text!r}") from None
    if until.tzinfo is None or until <= datetime.now(UTC):
        raise SystemExit("chatgql: --until must be in the future, with its UTC offset")
    return until


def _moderate(settings: Settings, work: Callable[[Database], Awaitable[Any]]) -> Any:
    """Run one of the operator's moderation calls; a refusal (a coded error) is a message and exit status 2."""
    from ..errors import ChatError

    async def run(database: Database) -> Any:
        try:
            return await work(database)
        except ChatError as error:
            print(f"chatgql: {error.code}: {error.message}", file=sys.stderr)
            raise SystemExit(2) from None

    return asyncio.run(_with_database(settings, run))


def reports(args: argparse.Namespace) -> None:
    """List the reports, resolve one with an action, or print the audit of the operator's actions."""
    from ..services import operator as moderation

    settings = _settings()
    if args.action == "list":
        wanted = moderation.ReportFilter(status=args.status, conversation_id=args.conversation, user_id=args.user)
        rows = _moderate(settings, lambda db: moderation.list_reports(db, wanted, args.after, args.limit))
    elif args.action == "audit":
        rows = _moderate(settings, lambda db: moderation.audit_log(db, args.after, args.limit))
    else:
        until = _until(args.until)
        rows = [
            _moderate(
                settings,
                lambda db: moderation.do_resolve_report(db, args.by, args.report_id, args.do, args.reason, until=until),
            )
        ]
    for row in rows:
        print(_json(row))


def ban(args: argparse.Namespace) -> None:
    """Ban a user app-wide, or from one group (--conversation)."""
    from ..services import operator as moderation

    settings = _settings()
    until = _until(args.until)
    if args.conversation is None:
        _moderate(settings, lambda db: moderation.do_ban_user(db, args.by, args.user_id, until, args.reason))
        print(f"banned {args.user_id} until {until.isoformat() if until else 'lifted'}")
    else:
        _moderate(
            settings,
            lambda db: moderation.do_ban_from_conversation(
                db, args.by, args.conversation, args.user_id, until, args.reason
            ),
        )
        print(
            f"banned {args.user_id} from conversation {args.conversation} until {until.isoformat() if until else 'lifted'}"
        )


def unban(args: argparse.Namespace) -> None:
    from ..services import operator as moderation

    settings = _settings()
    lifted = _moderate(settings, lambda db: moderation.do_unban_user(db, args.by, args.user_id, args.reason))
    print(f"unbanned {args.user_id}" if lifted else f"{args.user_id} was not banned")


def documents(args: argparse.Namespace) -> None:
    """`chatgql documents load MANIFEST`: the documents of a client's manifest, each checked against
    the schema, into the persisted_document table (again: nothing changes)."""
    import json

    from graphql import GraphQLError, parse, validate

    from ..compat import strawberry as strawberry_compat
    from ..errors import Conflict
    from ..graphql.schema import schema
    from ..services.documents import do_load_documents, read_manifest

    settings = _settings()
    try:
        loaded = read_manifest(json.loads(Path(args.manifest).read_text(encoding="utf-8")))
    except (OSError, ValueError) as error:
        print(f"chatgql: {args.manifest}: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    core_schema = strawberry_compat.core_schema(schema)
    for document_id, body, _ in loaded:
        try:
            problems = validate(core_schema, parse(body, max_tokens=settings.max_tokens))
        except GraphQLError as error:
            problems = [error]
        if problems:
            print(f"chatgql: document {document_id}: {problems[0].message}", file=sys.stderr)
            raise SystemExit(2)
    try:
        added = asyncio.run(_with_database(settings, lambda database: do_load_documents(database, loaded)))
    except Conflict as error:
        print(f"chatgql: {error.message}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"{added} documents added, {len(loaded) - added} already loaded")


def token(args: argparse.Namespace) -> None:
    from ..edge.auth import issue_token
    from ..errors import BadUserInput
    from ..services.checks import check_user_id

    settings = _settings()
    try:
        user_id = check_user_id(args.user_id, "USER_ID")
    except BadUserInput as error:
        print(f"chatgql: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    try:
        print(issue_token(settings, user_id, ttl_seconds=args.ttl))
    except ValueError as error:  # a ttl the server would refuse
        print(f"chatgql: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def export_schema(args: argparse.Namespace) -> None:
    from strawberry.printer import print_schema

    from ..graphql.schema import schema

    text = print_schema(schema) + "\n"
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="chatgql", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("serve", help="run the GraphQL API (with relay and consumer unless told not to)")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--no-relay", action="store_true", help="do not run the outbox relay in this process")
    p.add_argument("--no-consumer", action="store_true", help="do not run the Kafka consumer in this process")
    p.add_argument("--no-webhooks", action="store_true", help="do not run the webhook deliverer in this process")
    p.add_argument(
        "--workers",
        type=int,
        help="API processes sharing the port (CHATGQL_WORKERS; default: one per core but one, at least one)",
    )
    p.add_argument("--log-level", default="info")
    p.set_defaults(func=serve)

    p = commands.add_parser("migrate", help="apply database migrations")
    p.add_argument("revision", nargs="?", default="head")
    p.set_defaults(func=migrate)

    commands.add_parser("relay", help="run only the outbox relay").set_defaults(func=relay)
    commands.add_parser("consume", help="run only the Kafka consumer (feeds a redis:// bus)").set_defaults(func=consume)

    p = commands.add_parser("erase-user", help="erase every message USER_ID sent (tombstones, in batches)")
    p.add_argument("user_id", metavar="USER_ID")
    p.add_argument("--batch", type=positive, help="messages per transaction (CHATGQL_ERASE_BATCH_SIZE)")
    p.set_defaults(func=erase_user)

    p = commands.add_parser("retention", help="the retention policy")
    p.add_argument("action", choices=["run"], help="run: one pass now, erasing what is older than the bound")
    p.add_argument("--days", type=float, help="the bound (CHATGQL_RETENTION_DAYS)")
    p.add_argument("--batch", type=positive, help="messages per transaction (CHATGQL_ERASE_BATCH_SIZE)")
    p.set_defaults(func=retention)

    p = commands.add_parser("webhooks", help="run only the webhook deliverer; `dead`, `replay`: its dead letters")
    actions = p.add_subparsers(dest="action")
    dead = actions.add_parser("dead", help="list the dead letters (oldest first)")
    dead.add_argument("--limit", type=int, default=100)
    again = actions.add_parser("replay", help="queue dead letters again (same webhook-id and body)")
    again.add_argument("ids", nargs="*", type=int, metavar="ID")
    again.add_argument("--all", action="store_true", help="every dead letter")
    p.set_defaults(func=webhooks)

    p = commands.add_parser("reports", help="moderation: list reports, resolve one, the audit of actions")
    actions = p.add_subparsers(dest="action", required=True)
    listed = actions.add_parser("list", help="reports as JSON lines, by id ascending")
    listed.add_argument("--status", choices=["OPEN", "RESOLVED"])
    listed.add_argument("--conversation", type=positive, help="of this conversation only")
    listed.add_argument("--user", help="of this reported user only")
    listed.add_argument("--after", type=int, default=0, help="after this report id")
    listed.add_argument("--limit", type=positive, default=100)
    audit = actions.add_parser("audit", help="the operator's actions as JSON lines (who, when, what, why)")
    audit.add_argument("--after", type=int, default=0)
    audit.add_argument("--limit", type=positive, default=100)
    resolve = actions.add_parser("resolve", help="resolve an open report with an action (audited)")
    resolve.add_argument("report_id", type=positive, metavar="REPORT_ID")
    resolve.add_argument(
        "--action", dest="do", required=True, choices=["DISMISS", "DELETE_MESSAGE", "BAN_FROM_CONVERSATION", "BAN_APP"]
    )
    resolve.add_argument("--reason", required=True, help="why (kept in the audit)")
    resolve.add_argument("--by", required=True, help="who acts (kept in the audit)")
    resolve.add_argument("--until", help="a ban's end, ISO-8601 with offset (default: until lifted)")
    p.set_defaults(func=reports)

    for name, func, what in (
        ("ban", ban, "ban USER_ID app-wide (or from a group: --conversation)"),
        ("unban", unban, "lift USER_ID's app-wide ban"),
    ):
        p = commands.add_parser(name, help=what)
        p.add_argument("user_id", metavar="USER_ID")
        p.add_argument("--reason", required=True, help="why (kept in the audit)")
        p.add_argument("--by", required=True, help="who acts (kept in the audit)")
        if func is ban:
            p.add_argument("--until", help="when the ban ends, ISO-8601 with offset (default: until lifted)")
            p.add_argument("--conversation", type=positive, help="ban from this group only")
        p.set_defaults(func=func)
    p = commands.add_parser("documents", help="persisted documents: `load MANIFEST` (the allowlist)")
    p.add_argument("action", choices=["load"], help="load: add a manifest's documents (Apollo's, or {id: text})")
    p.add_argument("manifest", metavar="MANIFEST")
    p.set_defaults(func=documents)

    p = commands.add_parser("token", help="print a bearer token for USER_ID (local use)")
    p.add_argument("user_id", metavar="USER_ID")
    p.add_argument(
        "--ttl", type=int, help="lifetime in seconds (default and maximum: CHATGQL_JWT_MAX_LIFETIME_SECONDS)"
    )
    p.set_defaults(func=token)

    p = commands.add_parser("export-schema", help="print the GraphQL schema (SDL)")
    p.add_argument("-o", "--output")
    p.set_defaults(func=export_schema)

    args = parser.parse_args(argv)
    level = logging.getLevelName(getattr(args, "log_level", "info").upper().replace("TRACE", "DEBUG"))
    logs.configure(level if isinstance(level, int) else logging.INFO, migrations=args.command == "migrate")
    try:
        args.func(args)
    except datadir.DataDirInUse as error:
        print(f"chatgql: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    except Exception as error:
        from ..db import database_unavailable

        if not database_unavailable(error):
            raise
        # the database stopped (its serve did) or cannot be reached: what committed is done
        print(f"chatgql: the database cannot be reached ({error}); run the command again", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
