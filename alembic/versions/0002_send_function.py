"""chat_send(): the whole send transaction as one server-side call

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

One round trip instead of six (BEGIN, lock, dedupe lookup, insert, outbox,
COMMIT). Same steps as DESIGN.md "Sending a message", in the same order:
lock the conversation row, look the clientMsgId up under the lock, insert
seq = last_seq + 1, move last_seq and the sender's watermark, write the
events to the outbox. The event payloads are built by the caller
(chatgql.events.types); this function only fills in seq and createdAt.
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

CHAT_SEND = """
CREATE FUNCTION chat_send(
    p_conversation_id bigint,
    p_sender_id bigint,
    p_client_msg_id uuid,
    p_body text,
    p_message_event jsonb,  -- message.new without seq and createdAt
    p_read_event jsonb      -- read.updated without lastReadSeq
) RETURNS TABLE (outcome text, seq bigint, sender_id bigint, body text, created_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v_last_seq bigint;
    v_last_at timestamptz;
    v_read_seq bigint;
    v_seq bigint;
    v_at timestamptz;
    v_old message%ROWTYPE;
BEGIN
    -- 1. Sends to one conversation queue up here; other conversations never wait.
    SELECT c.last_seq, c.last_message_at INTO v_last_seq, v_last_at
      FROM conversation c WHERE c.id = p_conversation_id
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found', NULL::bigint, NULL::bigint, NULL::text, NULL::timestamptz;
        RETURN;
    END IF;
    SELECT m.last_read_seq INTO v_read_seq
      FROM conversation_member m
     WHERE m.conversation_id = p_conversation_id AND m.user_id = p_sender_id;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found', NULL::bigint, NULL::bigint, NULL::text, NULL::timestamptz;
        RETURN;
    END IF;

    -- 2. Under the lock: a concurrent retry has either committed or not started.
    SELECT * INTO v_old FROM message m
     WHERE m.conversation_id = p_conversation_id AND m.client_msg_id = p_client_msg_id;
    IF FOUND THEN
        RETURN QUERY SELECT
            CASE WHEN v_old.sender_id = p_sender_id AND v_old.body = p_body
                 THEN 'duplicate' ELSE 'conflict' END,
            v_old.seq, v_old.sender_id, v_old.body, v_old.created_at;
        RETURN;
    END IF;

    -- 3-5. Store seq = last_seq + 1; the sender has read their own message.
    v_seq := v_last_seq + 1;
    v_at := greatest(clock_timestamp(), v_last_at);  -- never before the previous message
    INSERT INTO message (conversation_id, seq, sender_id, client_msg_id, body, created_at)
    VALUES (p_conversation_id, v_seq, p_sender_id, p_client_msg_id, p_body, v_at);
    UPDATE conversation SET last_seq = v_seq, last_message_at = v_at WHERE id = p_conversation_id;
    UPDATE conversation_member SET last_read_seq = v_seq
     WHERE conversation_id = p_conversation_id AND user_id = p_sender_id AND last_read_seq < v_seq;
    INSERT INTO outbox (msg_key, payload)
    VALUES (p_conversation_id::text,
            p_message_event || jsonb_build_object('seq', v_seq, 'createdAt', v_at));
    IF v_read_seq < v_seq - 1 THEN
        -- The send also marked what others wrote before as read.
        INSERT INTO outbox (msg_key, payload)
        VALUES (p_conversation_id::text, p_read_event || jsonb_build_object('lastReadSeq', v_seq));
    END IF;
    RETURN QUERY SELECT 'stored', v_seq, p_sender_id, p_body, v_at;
END $$
"""


def upgrade() -> None:
    op.execute(CHAT_SEND)


def downgrade() -> None:
    op.execute("DROP FUNCTION chat_send(bigint, bigint, uuid, text, jsonb, jsonb)")
