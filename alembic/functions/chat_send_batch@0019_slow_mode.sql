-- revision: 0019_slow_mode
-- A group commit's sends to one conversation (services/groupcommit.py), in one statement: what
-- chat_send does for each, the conversation locked once. In slow mode it stores nothing: every
-- item's outcome is 'alone', and the caller sends each through chat_send.
CREATE OR REPLACE FUNCTION public.chat_send_batch(p_conversation_id bigint, p_sender_ids text[], p_client_msg_ids uuid[], p_bodies text[], p_message_events jsonb[], p_read_events jsonb[], p_message_keys text[], p_read_keys text[])
 RETURNS TABLE(i bigint, outcome text, seq bigint, sender_id text, body text, created_at timestamp with time zone)
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_custom_plan'
AS $function$
#variable_conflict use_column
DECLARE
    v_last_seq bigint;
    v_last_at timestamptz;
    v_at timestamptz;
    v_slow integer;
BEGIN
    -- Sends to one conversation queue up here, once per batch.
    SELECT c.last_seq, c.last_message_at, c.slow_mode_seconds INTO v_last_seq, v_last_at, v_slow
      FROM conversation c WHERE c.id = p_conversation_id
       FOR NO KEY UPDATE;
    IF NOT FOUND OR v_slow > 0 THEN
        RETURN QUERY SELECT n, CASE WHEN v_slow > 0 THEN 'alone' ELSE 'not_found' END,
                            NULL::bigint, NULL::text, NULL::text, NULL::timestamptz
                       FROM generate_series(1, cardinality(p_sender_ids)::bigint) n;
        RETURN;
    END IF;
    v_at := greatest(clock_timestamp(), v_last_at);  -- never before the previous message

    -- The senders' member rows, in user_id order: the order markRead's flush locks them in.
    PERFORM 1 FROM conversation_member cm
      WHERE cm.conversation_id = p_conversation_id AND cm.user_id = ANY (p_sender_ids)
      ORDER BY cm.user_id
        FOR NO KEY UPDATE;

    -- A new statement: its snapshot sees every send committed before the lock was ours.
    RETURN QUERY
    WITH item AS (
        SELECT t.n, t.sender_id, t.client_msg_id, t.body, t.message_event, t.read_event,
               m.last_read_seq, m.user_id IS NOT NULL AS member
          FROM unnest(p_sender_ids, p_client_msg_ids, p_bodies, p_message_events, p_read_events)
               WITH ORDINALITY AS t(sender_id, client_msg_id, body, message_event, read_event, n)
          LEFT JOIN (SELECT cm.user_id, cm.last_read_seq FROM conversation_member cm  -- the senders' rows only
                      WHERE cm.conversation_id = p_conversation_id AND cm.user_id = ANY (p_sender_ids)) m
                 ON m.user_id = t.sender_id
    ),
    old AS (
        SELECT m.client_msg_id, m.seq, m.sender_id, m.body, m.created_at, m.deleted_at IS NOT NULL AS deleted,
               CASE WHEN m.edited_at IS NOT NULL THEN (SELECT e.body FROM message_edit e
                WHERE e.conversation_id = p_conversation_id AND e.seq = m.seq
                ORDER BY e.change_seq LIMIT 1) END AS first_body
          FROM message m
         WHERE m.conversation_id = p_conversation_id AND m.client_msg_id = ANY (p_client_msg_ids)
    ),
    claim AS (  -- the first member's item per clientMsgId not stored yet
        SELECT DISTINCT ON (k.client_msg_id) k.n FROM item k
         WHERE k.member AND NOT EXISTS (SELECT 1 FROM old o WHERE o.client_msg_id = k.client_msg_id)
         ORDER BY k.client_msg_id, k.n
    ),
    fresh AS (
        SELECT k.*, v_last_seq + row_number() OVER (ORDER BY k.n) AS seq
          FROM item k JOIN claim USING (n)
    ),
    new_message AS (
        INSERT INTO message (conversation_id, seq, sender_id, client_msg_id, body, created_at)
        SELECT p_conversation_id, f.seq, f.sender_id, f.client_msg_id, f.body, v_at FROM fresh f ORDER BY f.seq
    ),
    moved AS (
        UPDATE conversation c SET last_seq = f.last, last_message_at = v_at
          FROM (SELECT max(fresh.seq) AS last FROM fresh) f
         WHERE c.id = p_conversation_id AND f.last IS NOT NULL
    ),
    watermark AS (
        UPDATE conversation_member m SET last_read_seq = f.last
          FROM (SELECT fresh.sender_id, max(fresh.seq) AS last FROM fresh GROUP BY fresh.sender_id) f
         WHERE m.conversation_id = p_conversation_id AND m.user_id = ANY (p_sender_ids)
           AND m.user_id = f.sender_id AND m.last_read_seq < f.last
    ),
    event AS (
        INSERT INTO outbox (msg_key, payload)
        SELECT p_conversation_id::text, e.payload FROM (
            SELECT f.seq, 0 AS kind, f.message_event || jsonb_build_object(p_message_keys[1], f.seq, p_message_keys[2], v_at) AS payload
              FROM fresh f
            UNION ALL
            SELECT w.seq, 1, w.read_event || jsonb_build_object(p_read_keys[1], w.seq)
              FROM (SELECT f.seq, f.read_event,
                           coalesce(lag(f.seq) OVER (PARTITION BY f.sender_id ORDER BY f.seq), f.last_read_seq)
                               AS read_before
                      FROM fresh f) w
             WHERE w.read_before < w.seq - 1  -- the send also marked what others wrote before as read
        ) e
        ORDER BY e.seq, e.kind
    ),
    origin AS (
        SELECT f.client_msg_id, f.n, f.seq, f.sender_id, f.body, v_at AS created_at, false AS deleted, NULL::text AS first_body FROM fresh f
        UNION ALL
        SELECT o.client_msg_id, NULL, o.seq, o.sender_id, o.body, o.created_at, o.deleted, o.first_body FROM old o
    )
    SELECT k.n,
           CASE WHEN NOT k.member THEN 'not_found'
                WHEN o.n = k.n THEN 'stored'
                WHEN o.sender_id = k.sender_id AND (o.body = k.body OR o.deleted OR o.first_body = k.body) THEN 'duplicate'
                ELSE 'conflict' END,
           o.seq, o.sender_id, o.body, o.created_at
      FROM item k
      LEFT JOIN origin o ON k.member AND o.client_msg_id = k.client_msg_id
     ORDER BY k.n;
END $function$
;
