// The inbox and the total unread: loaded once, then again whenever a message, a change
// to one (an edit, a deletion, a reaction) or a watermark move arrives in any of the
// viewer's conversations, and after a reconnect (what happened meanwhile is in the
// reload). Reloads never overlap: events arriving during one are answered by one more.
import { useCallback, useEffect, useRef, useState } from "react";
import { run } from "./client.js";
import { live } from "./live.js";
import { INBOX, INBOX_CHANGES, INBOX_MESSAGES, INBOX_READS } from "./operations.js";

export function useInbox(client) {
  const [inbox, setInbox] = useState({ loaded: false, viewer: null, conversations: [], error: null });
  const reloading = useRef(null); // null, "running" or "again"

  const reload = useCallback(async () => {
    if (reloading.current) {
      reloading.current = "again";
      return;
    }
    do {
      reloading.current = "running";
      try {
        const data = await run(client, "query", INBOX, {});
        setInbox({ loaded: true, viewer: data.viewer, conversations: data.inbox.nodes, error: null });
      } catch (error) {
        setInbox((inbox) => ({ ...inbox, error: error.message }));
      }
    } while (reloading.current === "again");
    reloading.current = null;
  }, [client]);

  useEffect(() => {
    reload();
    const stops = [
      live(client, INBOX_MESSAGES, () => ({}), reload, { onRestart: reload }),
      live(client, INBOX_CHANGES, () => ({}), reload, { onRestart: reload }),
      live(client, INBOX_READS, () => ({}), reload, { onRestart: reload }),
    ];
    return () => stops.forEach((stop) => stop());
  }, [client, reload]);

  return { ...inbox, reload };
}
