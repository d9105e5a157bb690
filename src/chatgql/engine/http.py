"""GraphQL over HTTP: which media type an answer has, and its status code.

The GraphQL-over-HTTP spec gives application/graphql-response+json answers their own
status codes: a request that never executed (a document that does not parse or
validate, variables that do not coerce, no such operation) is a 400 without a `data`
entry; anything that executed is a 200 with `data`. application/json answers stay
200 with `data` whatever happened (what clients written before the spec expect).

Both HTTP paths build their answer with `response_body` and take its status from
`status_code`: Strawberry's through the view methods of GraphQLOverHTTP, the
accepted-documents one (schema.py) through its `graphql_response`.
"""

from __future__ import annotations

from typing import Any, cast

from starlette.requests import Request
from starlette.responses import Response
from starlette.websockets import WebSocket
from strawberry.http import GraphQLHTTPResponse, process_result
from strawberry.types import ExecutionResult
from strawberry.types.execution import PreExecutionError

JSON = "application/json"
GRAPHQL_RESPONSE_JSON = "application/graphql-response+json"
# LIMIT_EXCEEDED reasons of operations that ran and were ended: not request errors.
_EXECUTED = frozenset({"TIMEOUT", "CPU", "RESPONSE_SIZE"})


_UTF8 = frozenset({"utf-8", "utf8"})


def request_media_type_refusal(content_type: str | None) -> str | None:
    """Why a POST body of this Content-Type is refused (HTTP 415), or None: it must be
    application/json (media types are case-insensitive), with no charset or a UTF-8 one
    (JSON is UTF-8, RFC 8259; `charset=utf-7` would be read as something it is not)."""
    media, _, parameters = (content_type or "").partition(";")
    if media.strip().lower() != JSON:
        return "Unsupported content type: send application/json"
    for parameter in parameters.split(";"):
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').lower() not in _UTF8:
            return "Unsupported charset: application/json is UTF-8"
    return None


def response_media_type(accept: str | None) -> str:
    """application/graphql-response+json when the client accepts it at least as readily
    as application/json; application/json otherwise (no Accept, */*, neither named)."""
    if not accept or GRAPHQL_RESPONSE_JSON not in accept:
        return JSON  # nearly every request: no parsing
    best = {GRAPHQL_RESPONSE_JSON: 0.0, JSON: 0.0}
    for part in accept.split(","):
        media, *params = (piece.strip() for piece in part.split(";"))
        media = media.lower()
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        if media in ("*/*", "application/*"):
            media = JSON  # a wildcard is what clients from before the spec send
        if media in best:
            best[media] = max(best[media], quality)
    graphql_response = best[GRAPHQL_RESPONSE_JSON]
    return GRAPHQL_RESPONSE_JSON if graphql_response > 0 and graphql_response >= best[JSON] else JSON


def is_request_error(result: ExecutionResult) -> bool:
    """The operation never executed: parsing or validation failed (PreExecutionError), or
    graphql-core refused before running a resolver (variables that do not coerce, no such
    operation): no data and no error with a path. A timeout executed: not one."""
    if isinstance(result, PreExecutionError):
        return True
    if result.data is not None or not result.errors:
        return False
    return all(
        error.path is None and (error.extensions or {}).get("reason") not in _EXECUTED for error in result.errors
    )


def response_body(result: ExecutionResult, media_type: str) -> dict[str, Any]:
    """The JSON answer to one operation; without `data` for a request error under
    application/graphql-response+json."""
    body = cast("dict[str, Any]", process_result(result))  # a TypedDict: the dict it is
    if media_type == GRAPHQL_RESPONSE_JSON and is_request_error(result):
        body.pop("data", None)
    return body


def status_code(body: dict[str, Any] | list[dict[str, Any]]) -> int:
    """200 when something executed (an answer has `data`); 400 when nothing did. Only
    application/graphql-response+json answers can lack `data`. A batch is 200 as soon
    as one of its operations executed (each keeps its own answer)."""
    if not isinstance(body, list):  # one answer (nearly every request): no generator to make
        return 200 if "data" in body else 400
    return 400 if body and all("data" not in answer for answer in body) else 200


def too_big_body(body: Any, size: int, limit: int) -> Any:
    """What answers in place of an answer of more than limit bytes (a batch: each of its answers)."""
    error = {
        "message": f"the answer came to {size:,} bytes, more than the {limit:,} allowed: ask for smaller pages",
        "extensions": {"code": "LIMIT_EXCEEDED", "reason": "RESPONSE_SIZE", "maxBytes": limit},
    }
    answer = {"data": None, "errors": [error]}
    return [answer for _ in body] if isinstance(body, list) else answer


def refusal_body(message: str, code: str, media_type: str) -> dict[str, Any]:
    """A request refused before any GraphQL ran (4xx): `data` is null for application/json
    clients, absent for application/graphql-response+json ones."""
    body: dict[str, Any] = {"errors": [{"message": message, "extensions": {"code": code}}]}
    if media_type == JSON:
        body = {"data": None, **body}
    return body


class GraphQLOverHTTP:
    """Mixed into Strawberry's ASGI view (before it): every HTTP answer gets its media
    type and status code from the functions above."""

    def graphql_response(self, result: ExecutionResult, accept: str | None) -> Response:
        """The answer to one operation executed outside Strawberry's view."""
        media_type = response_media_type(accept)
        body = response_body(result, media_type)
        return Response(self.encode_answer(body), status_code=status_code(body), media_type=media_type)

    def encode_answer(self, body: Any) -> bytes:
        """An HTTP answer's JSON; LIMIT_EXCEEDED (reason RESPONSE_SIZE) in its place past
        CHATGQL_MAX_RESPONSE_BYTES (the executed answer is not sent cut short)."""
        encoded = self.encode_json(body)  # type: ignore[attr-defined]
        data = encoded.encode() if isinstance(encoded, str) else encoded
        limit = self.deps.settings.max_response_bytes  # type: ignore[attr-defined]
        if len(data) > limit:
            return self.encode_json(too_big_body(body, len(data), limit)).encode()  # type: ignore[attr-defined]
        return data

    async def get_sub_response(self, request: Request | WebSocket) -> Response:
        sub_response = await super().get_sub_response(request)  # type: ignore[misc]
        sub_response.media_type = response_media_type(request.headers.get("accept"))
        return sub_response

    async def process_result(self, request: Request, result: ExecutionResult) -> GraphQLHTTPResponse:
        return cast("GraphQLHTTPResponse", response_body(result, response_media_type(request.headers.get("accept"))))

    def create_response(self, response_data: Any, sub_response: Response) -> Response:
        """Strawberry's (starlette's) create_response, with the answer encoded by encode_answer."""
        response = Response(self.encode_answer(response_data), media_type=sub_response.media_type or JSON)
        response.headers.raw.extend(sub_response.headers.raw)
        response.headers["content-type"] = sub_response.media_type or JSON
        if sub_response.background:
            response.background = sub_response.background
        # A resolver that set a status code has the last word.
        response.status_code = sub_response.status_code or status_code(response_data)
        return response
