"""Persisted documents: a request names its document by id instead of sending its text.

The three forms clients send (the same in an HTTP POST body, a GET's parameters and a
websocket's subscribe/start payload):

- `documentId` (GraphQL Code Generator's persisted documents, the GraphQL-over-HTTP
  convention; a `sha256:` prefix is allowed),
- `doc_id` (Relay),
- `extensions.persistedQuery.sha256Hash` (Apollo's persisted queries, version 1).

`PersistedDocuments.resolve` turns such a request into an ordinary one (its `query` set to
the stored text, the id taken out), so everything after it (the accepted-documents cache,
the planner, Strawberry) sees a text it already knows: a persisted document is parsed and
validated once per worker, like a repeated text.

The store is the database's persisted_document table (`chatgql documents load`), read on a
miss and kept here. In allowlist mode only stored documents run: an unknown id is refused
(PERSISTED_QUERY_NOT_FOUND), and so is a text sent without an id unless it is one of the
stored texts (PERSISTED_QUERY_NOT_IN_LIST), which lets a client that sends its listed
documents' texts work unchanged. Otherwise a text runs as ever, and Apollo's automatic
persisted queries register: a text sent with its sha256 is kept in this worker's memory
(bounded), never in the table, so a later request by that hash alone runs it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import ChatError
from ..services.documents import is_id, is_sha256, normal_id, sha256_of

NOT_FOUND = "PERSISTED_QUERY_NOT_FOUND"
NOT_IN_LIST = "PERSISTED_QUERY_NOT_IN_LIST"
# request fields that may name a document; a body without any of these bytes names none
MARKERS = (b"documentId", b"doc_id", b"persistedQuery")


class Refused(Exception):
    """A request refused before anything ran: a formatted GraphQL error's message and code."""

    def __init__(self, message: str, code: str, **extensions: object) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.extensions = {"code": code, **extensions}

    @property
    def formatted(self) -> dict[str, Any]:
        return {"message": self.message, "extensions": self.extensions}


def requested_id(request: dict[str, Any]) -> str | None:
    """The document id a request names, in any of the three forms; None when it names none.
    Refused: an id that is not a string, or more than one form naming different ids."""
    found: list[object] = []
    for key in ("documentId", "doc_id"):
        if request.get(key) is not None:
            found.append(request[key])
    extensions = request.get("extensions")
    if isinstance(extensions, dict) and (persisted := extensions.get("persistedQuery")) is not None:
        if not isinstance(persisted, dict) or persisted.get("version", 1) != 1:
            raise Refused("extensions.persistedQuery must be {version: 1, sha256Hash}", "BAD_USER_INPUT")
        found.append(persisted.get("sha256Hash"))
    if not found:
        return None
    if not all(isinstance(value, str) for value in found):
        raise Refused("a document id is a string", "BAD_USER_INPUT")
    ids = {normal_id(value) for value in found}  # type: ignore[arg-type]
    if not all(is_id(value) for value in ids):
        raise Refused("a document id has 1 to 200 letters, digits, _ . : or -", "BAD_USER_INPUT")
    if len(ids) > 1:
        raise Refused("the request names more than one document id", "BAD_USER_INPUT")
    return ids.pop()


def _strip(request: dict[str, Any]) -> None:
    request.pop("documentId", None)
    request.pop("doc_id", None)
    extensions = request.get("extensions")
    if isinstance(extensions, dict) and "persistedQuery" in extensions:
        rest = {key: value for key, value in extensions.items() if key != "persistedQuery"}
        request["extensions"] = rest or None
        if not rest:
            request.pop("extensions")


class PersistedDocuments:
    """id -> text: the stored documents this worker has read, and (outside allowlist mode) the
    texts clients registered by hash. lookup: the stored text of an id, or None; listed: whether
    a text is stored (under any id)."""

    def __init__(
        self,
        lookup: Callable[[str], Awaitable[str | None]],
        listed: Callable[[str], Awaitable[bool]],
        *,
        allowlist: bool,
        max_known: int = 10_000,
        max_registered: int = 1_000,
        max_registered_chars: int = 1_000_000,
    ) -> None:
        self._lookup = lookup
        self._listed = listed
        self._listed_texts: OrderedDict[str, None] = OrderedDict()  # allowlist mode: stored texts seen
        self.allowlist = allowlist
        self._known: OrderedDict[str, str] = OrderedDict()
        self._max_known = max_known
        self._registered: OrderedDict[str, str] = OrderedDict()
        self._max_registered = max_registered
        self._max_registered_chars = max_registered_chars
        self._registered_chars = 0

    def applies(self, body: bytes) -> bool:
        """Whether an HTTP body must go through resolve (a quick look at its bytes)."""
        return self.allowlist or any(marker in body for marker in MARKERS)

    async def resolve(self, request: dict[str, Any]) -> None:
        """Make request an ordinary one: its `query` the named document's text, the id fields
        taken out. Raises Refused (with the code the client is told) when it may not run."""
        document_id = requested_id(request)
        query = request.get("query")
        if document_id is None:
            if self.allowlist and query is not None and not await self._is_listed(query):
                raise Refused("this server runs only the documents in its list", NOT_IN_LIST)
            return
        if query is not None and not isinstance(query, str):
            return  # the ordinary path refuses it
        if query is not None and is_sha256(document_id) and sha256_of(query) != document_id:
            raise Refused("the document's sha256 hash is not the id sent with it", "BAD_USER_INPUT")
        stored = await self._find(document_id)
        if stored is None:
            if query is None or self.allowlist or not is_sha256(document_id):
                raise Refused("PersistedQueryNotFound", NOT_FOUND)
            self._register(document_id, query)
            stored = query
        elif query is not None and query != stored:
            raise Refused("the document sent is not the one stored under its id", "BAD_USER_INPUT")
        _strip(request)
        request["query"] = stored

    async def _find(self, document_id: str) -> str | None:
        if (text := self._known.get(document_id)) is not None:
            self._known.move_to_end(document_id)
            return text
        if not self.allowlist and (text := self._registered.get(document_id)) is not None:
            self._registered.move_to_end(document_id)
            return text
        try:
            text = await self._lookup(document_id)
        except ChatError as error:  # UNAVAILABLE, with its retryAfter
            raise Refused(error.message, error.code, **error.extensions) from None
        if text is not None:
            self._known[document_id] = text
            if len(self._known) > self._max_known:
                self._known.popitem(last=False)
        return text

    async def _is_listed(self, text: object) -> bool:
        if not isinstance(text, str):
            return False  # the ordinary path would refuse it anyway
        if text in self._listed_texts:
            self._listed_texts.move_to_end(text)
            return True
        try:
            listed = await self._listed(text)
        except ChatError as error:
            raise Refused(error.message, error.code, **error.extensions) from None
        if listed:
            self._listed_texts[text] = None
            if len(self._listed_texts) > self._max_known:
                self._listed_texts.popitem(last=False)
        return listed

    def _register(self, document_id: str, text: str) -> None:
        if len(text) > self._max_registered_chars:
            return
        self._registered[document_id] = text
        self._registered_chars += len(text)
        while len(self._registered) > self._max_registered or self._registered_chars > self._max_registered_chars:
            _, evicted = self._registered.popitem(last=False)
            self._registered_chars -= len(evicted)
