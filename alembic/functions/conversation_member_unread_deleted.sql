-- revision: 0016_function_sources
-- Keeps conversation_member.unread_deleted (the deleted messages above the watermark) as the
-- watermark moves.
CREATE OR REPLACE FUNCTION public.conversation_member_unread_deleted()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF NEW.last_read_seq > OLD.last_read_seq THEN
        NEW.unread_deleted := OLD.unread_deleted - (
            SELECT count(*) FROM message_change
             WHERE conversation_id = NEW.conversation_id AND kind = 'DELETED'
               AND seq > OLD.last_read_seq AND seq <= NEW.last_read_seq);
    ELSE
        NEW.unread_deleted := OLD.unread_deleted + (
            SELECT count(*) FROM message_change
             WHERE conversation_id = NEW.conversation_id AND kind = 'DELETED'
               AND seq > NEW.last_read_seq AND seq <= OLD.last_read_seq);
    END IF;
    RETURN NEW;
END $function$
;
