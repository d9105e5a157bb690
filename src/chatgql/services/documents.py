"""Persisted documents: what the server reads of them, and loading a client's manifest."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from ..db import Database, database_unavailable
from ..errors import Conflict, unavailable
from ..store import documents

_SHA256 = re.compile(r"[0-9a-f]{64}")
_ID = re.compile(r"[A-Za-z0-9_.:-]{1,200}")
_PREFIX = "sha256:"


def normal_id(document_id: str) -> str:
    """The id a document is stored under: a `sha256:` prefix taken off."""
    return document_id[len(_PREFIX) :] if document_id.startswith(_PREFIX) else document_id


def sha256_of(text: str) -> str:
    """The sha256 of text's UTF-8, in hex (a lone surrogate, which no stored text has, as itself)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def is_id(document_id: str) -> bool:
    """Whether document_id can name a document: 1 to 200 letters, digits, `_`, `.`, `:` or `-`."""
    return _ID.fullmatch(document_id) is not None


def is_sha256(document_id: str) -> bool:
    return _SHA256.fullmatch(document_id) is not None


async def find_document(database: Database, document_id: str) -> str | None:
    """The text stored under document_id, or None; UNAVAILABLE when the database is."""
    try:
        async with database.connection() as conn:
            return await documents.find(conn, document_id)
    except Exception as error:
        if database_unavailable(error):
            raise unavailable("the database cannot be reached") from None
        raise


async def is_listed(database: Database, text: str) -> bool:
    """Whether this text is a stored document's; UNAVAILABLE when the database is not reachable."""
    try:
        async with database.connection() as conn:
            return text in await documents.texts_by_hash(conn, sha256_of(text))
    except Exception as error:
        if database_unavailable(error):
            raise unavailable("the database cannot be reached") from None
        raise


async def do_load_documents(database: Database, loaded: Sequence[tuple[str, str, str | None]]) -> int:
    """Store (id, text, name) documents in one transaction; returns how many were new. CONFLICT,
    with nothing written, when an id is already stored with another text."""
    async with database.transaction() as conn:
        added, conflicting = await documents.load_txn(conn, loaded, [sha256_of(body) for _, body, _ in loaded])
        if conflicting:
            raise Conflict(
                f"{len(conflicting)} id(s) already stored with another text, e.g. {conflicting[0]}",
                ids=conflicting,
            )
    return added


APOLLO_FORMAT = "apollo-persisted-query-manifest"


def read_manifest(manifest: object) -> list[tuple[str, str, str | None]]:
    """(id, text, name) of each document of a manifest: Apollo's persisted query manifest
    ({format: "apollo-persisted-query-manifest", version: 1, operations: [{id, name, type, body}]})
    or an {id: text} map (GraphQL Code Generator's persisted documents, Relay's query map).
    An id may carry a `sha256:` prefix (taken off); a 64-hex-digit id must be its text's sha256.
    ValueError says what is wrong."""
    if isinstance(manifest, dict) and manifest.get("format") == APOLLO_FORMAT:
        if manifest.get("version") != 1:
            raise ValueError(f"{APOLLO_FORMAT} version {manifest.get('version')!r}: only version 1 is read")
        operations = manifest.get("operations")
        if not isinstance(operations, list):
            raise ValueError("an Apollo manifest's operations must be a list")
        entries = []
        for operation in operations:
            if not isinstance(operation, dict):
                raise ValueError("each operation of an Apollo manifest is an object {id, name, type, body}")
            name = operation.get("name")
            entries.append((operation.get("id"), operation.get("body"), name if isinstance(name, str) else None))
    elif isinstance(manifest, dict):
        entries = [(key, value, None) for key, value in manifest.items()]
    else:
        raise ValueError("a manifest is a JSON object: Apollo's, or {id: document text}")
    documents: dict[str, tuple[str, str, str | None]] = {}
    for document_id, body, name in entries:
        if not isinstance(document_id, str) or not isinstance(body, str):
            raise ValueError(f"document {document_id!r}: its id and its text must be strings")
        document_id = normal_id(document_id)
        if not is_id(document_id):
            raise ValueError(f"document {document_id!r}: an id has 1 to 200 letters, digits, _ . : or -")
        if is_sha256(document_id) and sha256_of(body) != document_id:
            raise ValueError(f"document {document_id}: the id is not its text's sha256 hash")
        if document_id in documents and documents[document_id][1] != body:
            raise ValueError(f"document {document_id}: listed twice with different texts")
        documents[document_id] = (document_id, body, name)
    return list(documents.values())
