"""Reports of messages and users (report), and the audit of the operator's actions (moderation_action)."""

from __future__ import annotations

from datetime import datetime

from ..db import Connection, Row

# The reported message as it is now: what its report keeps whatever happens to the message later.
_EVIDENCE = """
    jsonb_build_object(
        'body', m.body, 'createdAt', m.created_at, 'editedAt', m.edited_at, 'replyToSeq', m.reply_to_seq,
        'attachments', coalesce((
            SELECT jsonb_agg(jsonb_build_object('url', a.url, 'mimeType', a.mime_type, 'name', a.name,
                                                'sizeBytes', a.size_bytes) ORDER BY a.position)
              FROM message_attachment a WHERE a.conversation_id = m.conversation_id AND a.seq = m.seq), '[]'))
"""

REPORT_COLUMNS = (
    "id, reporter_id, reported_user_id, conversation_id, seq, reason, details, evidence, created_at, "
    "resolved_at, resolved_by, action, note"
)


async def insert_message_report(
    conn: Connection, reporter_id: str, conversation_id: int, seq: int, reason: str, details: str
) -> int | None:
    """Report message seq (not deleted) with its evidence; None when the reporter reported it before."""
    return await conn.fetchval(
        f"""
        INSERT INTO report (reporter_id, reported_user_id, conversation_id, seq, reason, details, evidence)
        SELECT $1, m.sender_id, m.conversation_id, m.seq, $4, $5, {_EVIDENCE}
          FROM message m WHERE m.conversation_id = $2 AND m.seq = $3
        ON CONFLICT ON CONSTRAINT report_once_key DO NOTHING
        RETURNING id
        """,
        reporter_id,
        conversation_id,
        seq,
        reason,
        details,
    )


async def insert_user_report(conn: Connection, reporter_id: str, user_id: str, reason: str, details: str) -> int | None:
    """Report a user; None when the reporter reported them before."""
    return await conn.fetchval(
        """
        INSERT INTO report (reporter_id, reported_user_id, reason, details) VALUES ($1, $2, $3, $4)
        ON CONFLICT ON CONSTRAINT report_once_key DO NOTHING
        RETURNING id
        """,
        reporter_id,
        user_id,
        reason,
        details,
    )


async def find(conn: Connection, reporter_id: str, conversation_id: int, seq: int, user_id: str | None) -> int | None:
    """The id of the reporter's earlier report of the message (or of user_id, with conversation 0 and seq 0)."""
    return await conn.fetchval(
        """
        SELECT id FROM report
         WHERE reporter_id = $1 AND conversation_id = $2 AND seq = $3 AND ($4::text IS NULL OR reported_user_id = $4)
        """,
        reporter_id,
        conversation_id,
        seq,
        user_id,
    )


async def page(
    conn: Connection,
    *,
    open_only: bool | None,
    conversation_id: int | None,
    user_id: str | None,
    after_id: int,
    limit: int,
) -> list[Row]:
    """Reports by id ascending after after_id: open (open_only True), resolved (False) or both (None),
    of one conversation and of one reported user when given."""
    return await conn.fetch(
        f"""
        SELECT {REPORT_COLUMNS} FROM report
         WHERE id > $1
           AND ($2::boolean IS NULL OR (resolved_at IS NULL) = $2)
           AND ($3::bigint IS NULL OR conversation_id = $3)
           AND ($4::text IS NULL OR reported_user_id = $4)
         ORDER BY id LIMIT $5
        """,
        after_id,
        open_only,
        conversation_id,
        user_id,
        limit,
    )


async def lock_txn(conn: Connection, report_id: int) -> Row | None:
    """The report, locked until the transaction ends (one resolution at a time)."""
    return await conn.fetchrow(f"SELECT {REPORT_COLUMNS} FROM report WHERE id = $1 FOR UPDATE", report_id)


async def resolve_txn(conn: Connection, report_id: int, operator: str, action: str, note: str, *, blank: bool) -> Row:
    """Mark the report resolved; blank: erase its evidence too."""
    return await conn.fetchrow(
        f"""
        UPDATE report SET resolved_at = clock_timestamp(), resolved_by = $2, action = $3, note = $4,
               evidence = CASE WHEN $5 THEN NULL ELSE evidence END
         WHERE id = $1 RETURNING {REPORT_COLUMNS}
        """,
        report_id,
        operator,
        action,
        note,
        blank,
    )


async def audit_txn(
    conn: Connection,
    operator: str,
    action: str,
    reason: str,
    *,
    report_id: int | None = None,
    user_id: str | None = None,
    conversation_id: int | None = None,
    seq: int | None = None,
    until: datetime | None = None,
) -> None:
    """One row of the operator's audit: who did what, when and why."""
    await conn.execute(
        """
        INSERT INTO moderation_action (operator, action, reason, report_id, user_id, conversation_id, seq, until)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
        """,
        operator,
        action,
        reason,
        report_id,
        user_id,
        conversation_id,
        seq,
        until,
    )


async def audit_page(conn: Connection, after_id: int, limit: int) -> list[Row]:
    return await conn.fetch(
        """
        SELECT id, operator, action, report_id, user_id, conversation_id, seq, until, reason, created_at
          FROM moderation_action WHERE id > $1 ORDER BY id LIMIT $2
        """,
        after_id,
        limit,
    )


async def blank_resolved_evidence(conn: Connection, user_id: str) -> int:
    """Erase the evidence of the resolved reports of user_id's messages (erase-user); returns how many."""
    result = await conn.execute(
        "UPDATE report SET evidence = NULL WHERE reported_user_id = $1 AND resolved_at IS NOT NULL AND evidence IS NOT NULL",
        user_id,
    )
    return int(result.split()[-1])
