-- revision: 0016_function_sources
-- Keeps conversation.member_count as members are added (a statement trigger).
CREATE OR REPLACE FUNCTION public.conversation_member_count_added()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    UPDATE conversation c SET member_count = c.member_count + d.n
      FROM (SELECT conversation_id, count(*) AS n FROM added GROUP BY 1) d
     WHERE c.id = d.conversation_id;
    RETURN NULL;
END $function$
;
