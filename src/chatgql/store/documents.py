"""Persisted documents: the GraphQL documents clients send by id (migration 0023_persisted_documents)."""

from __future__ import annotations

from collections.abc import Sequence

from ..db import Connection


async def find(conn: Connection, document_id: str) -> str | None:
    """The text of the document stored under document_id, or None."""
    return await conn.fetchval("SELECT body FROM persisted_document WHERE id = $1", document_id)


async def texts_by_hash(conn: Connection, text_sha256: str) -> list[str]:
    """The stored texts whose sha256 (hex) is text_sha256 (one, but for a collision)."""
    rows = await conn.fetch("SELECT DISTINCT body FROM persisted_document WHERE body_sha256 = $1", text_sha256)
    return [row["body"] for row in rows]


async def load_txn(
    conn: Connection, documents: Sequence[tuple[str, str, str | None]], hashes: Sequence[str]
) -> tuple[int, list[str]]:
    """Store (id, body, name) documents, hashes[i] the sha256 of documents[i]'s body; an id already stored with the same body is left as it is.
    Returns how many were new and the ids already stored with another body (nothing is written
    then: call it in a transaction and roll back)."""
    ids = [document[0] for document in documents]
    bodies = [document[1] for document in documents]
    names = [document[2] for document in documents]
    conflicting = await conn.fetch(
        "SELECT d.id FROM persisted_document d JOIN unnest($1::text[], $2::text[]) AS n(id, body)"
        ' ON d.id = n.id COLLATE "C" WHERE d.body <> n.body ORDER BY d.id',
        ids,
        bodies,
    )
    if conflicting:
        return 0, [row["id"] for row in conflicting]
    inserted = await conn.fetch(
        "INSERT INTO persisted_document (id, body, name, body_sha256)"
        " SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[])"
        " ON CONFLICT (id) DO NOTHING RETURNING id",
        ids,
        bodies,
        names,
        hashes,
    )
    return len(inserted), []


async def count(conn: Connection) -> int:
    """How many documents are stored."""
    return await conn.fetchval("SELECT count(*) FROM persisted_document")
