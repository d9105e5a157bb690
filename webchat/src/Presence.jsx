// A user's presence as they let the viewer see it: a green dot while online, else "last seen"
// (docs/guide/drafts-and-presence.md). presenceChanged answers the state now, then each change.
import { useEffect, useState } from "react";
import { live } from "./live.js";
import { PRESENCE_CHANGED } from "./operations.js";

export function Presence({ client, userId }) {
  const [presence, setPresence] = useState(null);
  useEffect(() => {
    setPresence(null);
    return live(client, PRESENCE_CHANGED, () => ({ u: [userId] }), (data) => setPresence(data.presenceChanged));
  }, [client, userId]);
  if (!presence || !presence.visible) return null;
  if (presence.online) {
    return (
      <span className="presence online" data-testid="presence" title="online">
        ● online
      </span>
    );
  }
  if (!presence.lastSeenAt) return null;
  const at = new Date(presence.lastSeenAt);
  return (
    <span className="presence" data-testid="presence" title={at.toISOString()}>
      last seen {at.toLocaleString("en", { dateStyle: "short", timeStyle: "short" })}
    </span>
  );
}
