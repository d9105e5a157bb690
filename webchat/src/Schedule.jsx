import { useState } from "react";
import { run } from "./client.js";
import { SCHEDULE } from "./operations.js";

// "Send later": the draft scheduled for a time the user picks (scheduleMessage). At that time the
// server sends it as an ordinary message, which arrives here like any other (messageNew).
export function Schedule({ client, conversationId, draft, disabled, onScheduled }) {
  const [open, setOpen] = useState(false);
  const [when, setWhen] = useState("");
  const [status, setStatus] = useState(null);

  async function schedule(event) {
    event.preventDefault();
    const sendAt = new Date(when);
    if (!draft.trim() || Number.isNaN(sendAt.getTime())) return;
    try {
      const data = await run(client, "mutation", SCHEDULE, {
        c: conversationId,
        m: crypto.randomUUID(),
        b: draft,
        at: sendAt.toISOString(),
      });
      const scheduled = data.scheduleMessage.scheduledMessage;
      setStatus(`scheduled for ${new Date(scheduled.sendAt).toLocaleString()}`);
      setOpen(false);
      onScheduled();
    } catch (error) {
      setStatus(`not scheduled: ${error.message}`);
    }
  }

  return (
    <div className="schedule" data-testid="schedule">
      {open ? (
        <form onSubmit={schedule}>
          <input
            type="datetime-local"
            value={when}
            onChange={(event) => setWhen(event.target.value)}
            aria-label="Send at"
            data-testid="schedule-at"
            required
          />
          <button type="submit" disabled={disabled || !draft.trim()} data-testid="schedule-submit">
            Send later
          </button>
          <button type="button" onClick={() => setOpen(false)}>
            Cancel
          </button>
        </form>
      ) : (
        <button type="button" onClick={() => setOpen(true)} data-testid="schedule-open" title="Send later">
          ⏰
        </button>
      )}
      {status && (
        <span className="schedule-status" role="status" data-testid="schedule-status">
          {status}
        </span>
      )}
    </div>
  );
}

// Disappearing messages: the conversation's time to live, as "24 h", "5 min", "30 s".
export function ttlLabel(seconds) {
  if (seconds % 86400 === 0) return `${seconds / 86400} d`;
  if (seconds % 3600 === 0) return `${seconds / 3600} h`;
  if (seconds % 60 === 0) return `${seconds / 60} min`;
  return `${seconds} s`;
}
