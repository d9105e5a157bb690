-- revision: 0021_blocks
-- One send: the next seq of the conversation, the message, the sender's own watermark and the
-- message.new (and, when the send also read others' messages, read.updated) outbox rows, in one
-- statement. Idempotent on (conversation_id, client_msg_id). Called by store/messages.py.
-- Slow mode (conversation.slow_mode_seconds > 0): a MEMBER's send within that many seconds of their
-- previous one is refused, outcome 'slow_mode', seq the whole seconds left to wait.
-- A sender banned app-wide ('banned') and a direct conversation with a block between its two
-- members ('blocked') store nothing new (docs/guide/moderation.md).
CREATE OR REPLACE FUNCTION public.chat_send(p_conversation_id bigint, p_sender_id text, p_client_msg_id uuid, p_body text, p_message_event jsonb, p_read_event jsonb, p_message_keys text[], p_read_keys text[])
 RETURNS TABLE(outcome text, seq bigint, sender_id text, body text, created_at timestamp with time zone)
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    v_last_seq bigint;
    v_last_at timestamptz;
    v_read_seq bigint;
    v_seq bigint;
    v_at timestamptz;
    v_old message%ROWTYPE;
    v_slow integer;
    v_role text;
    v_sent_at timestamptz;
    v_type text;
BEGIN
    -- 1. Sends to one conversation queue up here; other conversations never wait.
    SELECT c.last_seq, c.last_message_at, c.slow_mode_seconds, c.type INTO v_last_seq, v_last_at, v_slow, v_type
      FROM conversation c WHERE c.id = p_conversation_id
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found', NULL::bigint, NULL::text, NULL::text, NULL::timestamptz;
        RETURN;
    END IF;
    SELECT m.last_read_seq, m.role, m.last_sent_at INTO v_read_seq, v_role, v_sent_at
      FROM conversation_member m
     WHERE m.conversation_id = p_conversation_id AND m.user_id = p_sender_id;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found', NULL::bigint, NULL::text, NULL::text, NULL::timestamptz;
        RETURN;
    END IF;

    -- 2. Under the lock: a concurrent retry has either committed or not started.
    SELECT * INTO v_old FROM message m
     WHERE m.conversation_id = p_conversation_id AND m.client_msg_id = p_client_msg_id;
    IF FOUND THEN
        RETURN QUERY SELECT
            CASE WHEN v_old.sender_id = p_sender_id AND (v_old.body = p_body OR v_old.deleted_at IS NOT NULL
                 OR (v_old.edited_at IS NOT NULL AND p_body = (SELECT e.body FROM message_edit e
                WHERE e.conversation_id = p_conversation_id AND e.seq = v_old.seq
                ORDER BY e.change_seq LIMIT 1)))
                 THEN 'duplicate' ELSE 'conflict' END,
            v_old.seq, v_old.sender_id, v_old.body, v_old.created_at;
        RETURN;
    END IF;

    -- Moderation, under the locks a ban (the sender's, taken exclusively by store/app_bans.py) and
    -- a block (the conversation's) take: nothing is stored after either has committed.
    PERFORM pg_advisory_xact_lock_shared(7261304, hashtext(p_sender_id));
    IF EXISTS (SELECT 1 FROM user_ban b WHERE b.user_id = p_sender_id
                AND (b.until IS NULL OR b.until > clock_timestamp())) THEN
        RETURN QUERY SELECT 'banned', NULL::bigint, NULL::text, NULL::text, NULL::timestamptz;
        RETURN;
    END IF;
    IF v_type = 'DIRECT' AND EXISTS (SELECT 1 FROM direct_pair d JOIN user_block b
                ON (b.blocker_id = d.user_low AND b.blocked_id = d.user_high)
                OR (b.blocker_id = d.user_high AND b.blocked_id = d.user_low)
             WHERE d.conversation_id = p_conversation_id) THEN
        RETURN QUERY SELECT 'blocked', NULL::bigint, NULL::text, NULL::text, NULL::timestamptz;
        RETURN;
    END IF;

    v_at := greatest(clock_timestamp(), v_last_at);  -- never before the previous message
    IF v_slow > 0 AND v_role = 'MEMBER' AND v_at < v_sent_at + make_interval(secs => v_slow) THEN
        RETURN QUERY SELECT 'slow_mode',
            ceil(extract(epoch FROM v_sent_at + make_interval(secs => v_slow) - v_at))::bigint,
            NULL::text, NULL::text, NULL::timestamptz;
        RETURN;
    END IF;

    -- 3-5. Store seq = last_seq + 1; the sender has read their own message.
    v_seq := v_last_seq + 1;
    INSERT INTO message (conversation_id, seq, sender_id, client_msg_id, body, created_at)
    VALUES (p_conversation_id, v_seq, p_sender_id, p_client_msg_id, p_body, v_at);
    UPDATE conversation SET last_seq = v_seq, last_message_at = v_at WHERE id = p_conversation_id;
    UPDATE conversation_member SET last_read_seq = v_seq
     WHERE conversation_id = p_conversation_id AND user_id = p_sender_id AND last_read_seq < v_seq;
    IF v_slow > 0 THEN
        UPDATE conversation_member SET last_sent_at = v_at
         WHERE conversation_id = p_conversation_id AND user_id = p_sender_id;
    END IF;
    INSERT INTO outbox (msg_key, payload)
    VALUES (p_conversation_id::text,
            p_message_event || jsonb_build_object(p_message_keys[1], v_seq, p_message_keys[2], v_at));
    IF v_read_seq < v_seq - 1 THEN
        -- The send also marked what others wrote before as read.
        INSERT INTO outbox (msg_key, payload)
        VALUES (p_conversation_id::text, p_read_event || jsonb_build_object(p_read_keys[1], v_seq));
    END IF;
    RETURN QUERY SELECT 'stored', v_seq, p_sender_id, p_body, v_at;
END $function$
;
