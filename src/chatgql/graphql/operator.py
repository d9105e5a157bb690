"""The operator's moderation API (docs/guide/moderation.md): POST /operator/graphql, a schema of its own over
services/operator.py, reached only with `Authorization: Bearer <CHATGQL_OPERATOR_TOKEN>`.

The token is a secret of the deployment, not a JWT: no end-user token can carry it. A request without
it is refused with UNAUTHENTICATED (HTTP 401) before anything is parsed or resolved. No GraphiQL, no
websocket, no subscriptions."""

from __future__ import annotations

import enum
import hmac
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import strawberry
from graphql import GraphQLError
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send
from strawberry.asgi import GraphQL
from strawberry.scalars import JSON
from strawberry.schema.config import StrawberryConfig

from ..db import Database, Row
from ..errors import BadUserInput
from ..services import operator as moderation
from .errors import to_contract_errors
from .scalars import SCALARS, Long

PATH = "/operator/graphql"
MAX_PAGE = 500
START = Long(0)  # `after`: from the first


@strawberry.enum
class ReportStatus(enum.Enum):
    OPEN = "OPEN"
    RESOLVED = "RESOLVED"


@strawberry.enum
class ModerationActionKind(enum.Enum):
    DISMISS = "DISMISS"
    DELETE_MESSAGE = "DELETE_MESSAGE"
    BAN_FROM_CONVERSATION = "BAN_FROM_CONVERSATION"
    BAN_APP = "BAN_APP"


@strawberry.type
class Report:
    id: Long
    reporter_id: strawberry.ID
    reported_user_id: strawberry.ID
    conversation_id: strawberry.ID | None = strawberry.field(description="null: a report of a user")
    seq: Long | None = strawberry.field(description="null: a report of a user")
    reason: str
    details: str | None
    evidence: JSON | None = strawberry.field(description="the message as it was; null once erased")
    created_at: datetime
    resolved_at: datetime | None
    resolved_by: str | None
    action: str | None
    note: str | None = strawberry.field(description="the reason given when it was resolved")

    @classmethod
    def from_row(cls, row: Row) -> Report:
        return cls(
            id=Long(row["id"]),
            reporter_id=strawberry.ID(row["reporter_id"]),
            reported_user_id=strawberry.ID(row["reported_user_id"]),
            conversation_id=strawberry.ID(str(row["conversation_id"])) if row["conversation_id"] else None,
            seq=Long(row["seq"]) if row["seq"] else None,
            reason=row["reason"],
            details=row["details"],
            evidence=row["evidence"],
            created_at=row["created_at"],
            resolved_at=row["resolved_at"],
            resolved_by=row["resolved_by"],
            action=row["action"],
            note=row["note"],
        )


@strawberry.type
class ModerationAction:
    id: Long
    operator: str = strawberry.field(description="who acted (`by`)")
    action: str
    report_id: Long | None
    user_id: strawberry.ID | None
    conversation_id: strawberry.ID | None
    seq: Long | None
    until: datetime | None
    reason: str
    created_at: datetime

    @classmethod
    def from_row(cls, row: Row) -> ModerationAction:
        return cls(
            id=Long(row["id"]),
            operator=row["operator"],
            action=row["action"],
            report_id=None if row["report_id"] is None else Long(row["report_id"]),
            user_id=None if row["user_id"] is None else strawberry.ID(row["user_id"]),
            conversation_id=None if row["conversation_id"] is None else strawberry.ID(str(row["conversation_id"])),
            seq=None if row["seq"] is None else Long(row["seq"]),
            until=row["until"],
            reason=row["reason"],
            created_at=row["created_at"],
        )


def _database(info: strawberry.Info) -> Database:
    return info.context["database"]


def _page(first: int) -> int:
    if not 1 <= first <= MAX_PAGE:
        raise BadUserInput(f"first must be between 1 and {MAX_PAGE}")
    return first


def _conversation(text: strawberry.ID | None) -> int | None:
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()) or len(text) > 19:
        raise BadUserInput("conversationId must be a conversation's id")
    return int(text)


def _by(by: str) -> str:
    by = by.strip()
    if not by:
        raise BadUserInput("by must name who acts (it is audited)")
    return by


@strawberry.type
class Query:
    @strawberry.field(description="Reports by id ascending, after the id `after`, filtered.")
    async def reports(
        self,
        info: strawberry.Info,
        status: ReportStatus | None = None,
        conversation_id: strawberry.ID | None = None,
        user_id: strawberry.ID | None = None,
        after: Long = START,
        first: int = 100,
    ) -> list[Report]:
        wanted = moderation.ReportFilter(
            status=None if status is None else status.value,
            conversation_id=_conversation(conversation_id),
            user_id=user_id,
        )
        rows = await moderation.list_reports(_database(info), wanted, after, _page(first))
        return [Report.from_row(row) for row in rows]

    @strawberry.field(description="The operator's actions by id ascending: who, when, what, why.")
    async def audit_log(self, info: strawberry.Info, after: Long = START, first: int = 100) -> list[ModerationAction]:
        rows = await moderation.audit_log(_database(info), after, _page(first))
        return [ModerationAction.from_row(row) for row in rows]


@strawberry.type
class Mutation:
    @strawberry.mutation(description="Resolve an open report with an action, audited in the same transaction.")
    async def resolve_report(
        self,
        info: strawberry.Info,
        report_id: Long,
        action: ModerationActionKind,
        reason: str,
        by: str,
        until: datetime | None = None,
    ) -> Report:
        row = await moderation.do_resolve_report(
            _database(info), _by(by), report_id, action.value, reason, until=_until(until)
        )
        return Report.from_row(row)

    @strawberry.mutation(description="Ban a user app-wide, or from one group (conversationId), until `until`.")
    async def ban_user(
        self,
        info: strawberry.Info,
        user_id: strawberry.ID,
        reason: str,
        by: str,
        until: datetime | None = None,
        conversation_id: strawberry.ID | None = None,
    ) -> bool:
        cid = _conversation(conversation_id)
        if cid is None:
            await moderation.do_ban_user(_database(info), _by(by), user_id, _until(until), reason)
        else:
            await moderation.do_ban_from_conversation(_database(info), _by(by), cid, user_id, _until(until), reason)
        return True

    @strawberry.mutation(description="Lift a user's app-wide ban; false when there was none.")
    async def unban_user(self, info: strawberry.Info, user_id: strawberry.ID, reason: str, by: str) -> bool:
        return await moderation.do_unban_user(_database(info), _by(by), user_id, reason)


def _until(until: datetime | None) -> datetime | None:
    if until is not None and (until.tzinfo is None or until <= datetime.now(UTC)):
        raise BadUserInput("until must be in the future, with its UTC offset")
    return until


class OperatorSchema(strawberry.Schema):
    def process_errors(self, errors: list[GraphQLError], execution_context: Any = None) -> None:
        to_contract_errors(errors)


SCHEMA = OperatorSchema(query=Query, mutation=Mutation, config=StrawberryConfig(scalar_map=SCALARS))

UNAUTHENTICATED_BODY = {
    "data": None,
    "errors": [{"message": "the operator's token is required", "extensions": {"code": "UNAUTHENTICATED"}}],
}


def authorized(token: str, authorization: str | None) -> bool:
    """Whether the Authorization header is exactly `Bearer <token>` (compared in constant time)."""
    expected = f"Bearer {token}".encode()
    return hmac.compare_digest((authorization or "").strip().encode("utf-8", "surrogateescape"), expected)


class OperatorGraphQL(GraphQL[dict[str, Any], None]):
    """The operator's endpoint: HTTP only, every request checked for the operator's token first."""

    def __init__(self, token: str, database: Callable[[], Database]) -> None:
        super().__init__(SCHEMA, graphql_ide=None, allow_queries_via_get=False, subscription_protocols=())
        self.token = token
        self.database = database  # the process's Database, once its lifespan has opened it

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if not authorized(self.token, Request(scope).headers.get("authorization")):
            await JSONResponse(UNAUTHENTICATED_BODY, status_code=401)(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    async def get_context(self, request: Any, response: Any) -> dict[str, Any]:
        return {"database": self.database()}
