"""`chatgql serve | migrate | relay | consume | token | export-schema`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from . import datadir, logs
from .settings import Settings, load_settings


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
    from .websocket import LeanWebSocketProtocol

    overrides: dict[str, object] = {}
    if args.no_relay:
        overrides["run_relay"] = False
    if args.no_consumer:
        overrides["run_consumer"] = False
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
        ws=LeanWebSocketProtocol,  # websockets-sansio, lighter per idle connection
        log_level=args.log_level,
        access_log=settings.access_log_enabled,
        ws_max_size=1 << 20,
        **uvicorn_options(settings),  # httptools with header and body deadlines; the connection cap
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
    """uvicorn's worker processes, each building the app from the environment. The database
    (embedded or not) is ready and migrated here, once, before any of them starts."""
    import os

    import uvicorn

    from . import db
    from .app import startup_line

    embedded = None
    if settings.database_url is None:
        embedded, url = db.start_embedded_postgres(settings.data_dir)
    else:
        url = settings.database_url.get_secret_value()
    try:
        if settings.migrate_on_start:
            asyncio.run(db.upgrade(url))
        os.environ["CHATGQL_DATABASE_URL"] = url
        os.environ["CHATGQL_MIGRATE_ON_START"] = "false"
        for name, value in overrides.items():
            os.environ[f"CHATGQL_{name.upper()}"] = str(value).lower() if isinstance(value, bool) else str(value)
        logging.getLogger("chatgql").info("%s · workers: %d", startup_line(settings), settings.workers)
        uvicorn.run("chatgql.app:create_app_from_environment", factory=True, workers=settings.workers, **server_options)
    finally:
        if embedded is not None:
            embedded.cleanup()


async def _run_until_cancelled(settings: Settings) -> None:
    from .app import running

    async with running(settings, api=False):
        await asyncio.Event().wait()


def relay(args: argparse.Namespace) -> None:
    asyncio.run(_run_until_cancelled(_settings(run_relay=True, run_consumer=False)))


def consume(args: argparse.Namespace) -> None:
    settings = _settings(run_relay=False, run_consumer=True)
    if not settings.kafka_bootstrap_servers:
        raise SystemExit("chatgql consume needs CHATGQL_KAFKA_BOOTSTRAP_SERVERS")
    asyncio.run(_run_until_cancelled(settings))


def migrate(args: argparse.Namespace) -> None:
    from . import db

    settings = _settings()

    async def main() -> None:
        if settings.database_url is not None:
            await db.upgrade(settings.database_url.get_secret_value(), args.revision)
            return
        server, url = await asyncio.to_thread(db.start_embedded_postgres, settings.data_dir)
        try:
            await db.upgrade(url, args.revision)
        finally:
            server.cleanup()

    asyncio.run(main())


def token(args: argparse.Namespace) -> None:
    from .auth import issue_token
    from .services.checks import check_id

    settings = _settings()
    user_id = check_id(args.user_id, "USER_ID")
    try:
        print(issue_token(settings, user_id, ttl_seconds=args.ttl))
    except ValueError as error:  # a ttl the server would refuse
        print(f"chatgql: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def export_schema(args: argparse.Namespace) -> None:
    from strawberry.printer import print_schema

    from .graphql.schema import schema

    text = print_schema(schema) + "\n"
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="chatgql", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("serve", help="run the GraphQL API (with relay and consumer unless told not to)")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--no-relay", action="store_true", help="do not run the outbox relay in this process")
    p.add_argument("--no-consumer", action="store_true", help="do not run the Kafka consumer in this process")
    p.add_argument("--workers", type=int, help="API processes sharing the port (CHATGQL_WORKERS; >1 needs redis://)")
    p.add_argument("--log-level", default="info")
    p.set_defaults(func=serve)

    p = commands.add_parser("migrate", help="apply database migrations")
    p.add_argument("revision", nargs="?", default="head")
    p.set_defaults(func=migrate)

    commands.add_parser("relay", help="run only the outbox relay").set_defaults(func=relay)
    commands.add_parser("consume", help="run only the Kafka consumer (feeds a redis:// bus)").set_defaults(func=consume)

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


if __name__ == "__main__":
    main()
