import { useState } from "react";
import { ForwardForm, QuoteBlock } from "./Quote.jsx";

const THUMBS_UP = "👍";

// One message: its body ("edited" once edited; a tombstone once deleted), its 👍 toggle
// with the count, and for the viewer's own messages edit and delete; the message it quotes
// (Quote.jsx), a "forwarded" mark, quote, forward and save, and its thread; pin or unpin (Pins.jsx
// lists the pinned ones; a pinned message shows 📌, and is highlighted when shown from that list).
export function Message({
  message,
  mine,
  group,
  maxBodyChars,
  seenBy,
  onEdit,
  onDelete,
  onReact,
  pinned,
  highlighted,
  onPin,
  onBlock,
  onReport,
  onThread,
  onQuote,
  onForward,
  onSave,
  conversations,
}) {
  const [editing, setEditing] = useState(false);
  const [forwarding, setForwarding] = useState(false);
  const [saved, setSaved] = useState(false);
  const [reporting, setReporting] = useState(false);
  const [reported, setReported] = useState(false);
  const [shown, setShown] = useState(false); // a blocked sender's message, opened anyway
  const [error, setError] = useState(null);
  // Run an edit, delete or reaction; true when it worked, its error shown when not.
  const attempt = (action) =>
    action().then(
      () => (setError(null), true),
      (failure) => (setError(failure.message), false),
    );

  if (message.deletedAt) {
    return (
      <li className={`message deleted ${mine ? "mine" : ""}`} data-testid="message" data-seq={message.seq}>
        <span className="body" data-testid="tombstone">message deleted</span>
      </li>
    );
  }
  if (!mine && message.senderBlockedByViewer && !shown) {
    return (
      <li className="message blocked" data-testid="message" data-seq={message.seq}>
        <span className="body" data-testid="blocked-message">
          message from user {message.senderId}, whom you blocked
        </span>
        <span className="meta">
          <button className="link" onClick={() => setShown(true)}>
            show
          </button>
          <button className="link" data-testid="unblock" onClick={() => attempt(() => onBlock(false))}>
            unblock
          </button>
        </span>
        {error && <span className="error">{error}</span>}
      </li>
    );
  }
  const thumbs = message.reactions.find((reaction) => reaction.emoji === THUMBS_UP);
  return (
    <li
      className={`message ${mine ? "mine" : ""} ${highlighted ? "highlighted" : ""}`}
      data-testid="message"
      data-seq={message.seq}
    >
      {!mine && <span className="sender">user {message.senderId}</span>}
      {pinned && (
        <span className="pinned-mark" data-testid="pinned-mark" title="pinned">
          📌 pinned
        </span>
      )}
      {message.forwarded && (
        <span className="forwarded" data-testid="forwarded">
          forwarded
        </span>
      )}
      <QuoteBlock quote={message.quote} />
      {editing ? (
        <EditForm
          body={message.body}
          maxBodyChars={maxBodyChars}
          onDelete={() => attempt(onDelete)}
          onCancel={() => setEditing(false)}
          onSave={(body) => attempt(() => onEdit(body)).then((saved) => saved && setEditing(false))}
        />
      ) : (
        <span className="body">{message.body}</span>
      )}
      <span className="meta">
        <button
          className={`reaction ${thumbs?.reactedByViewer ? "mine" : ""}`}
          data-testid="react"
          aria-pressed={Boolean(thumbs?.reactedByViewer)}
          title={thumbs?.reactedByViewer ? "take back your 👍" : "👍"}
          onClick={() => attempt(() => onReact(THUMBS_UP, !thumbs?.reactedByViewer))}
        >
          {THUMBS_UP}
          {thumbs ? ` ${thumbs.count}` : ""}
        </button>
        {onThread && (
          <button className="link" data-testid="open-thread" onClick={onThread}>
            thread
          </button>
        )}
        <button className="link" data-testid="quote-action" onClick={onQuote}>
          quote
        </button>
        <button className="link" data-testid="forward" onClick={() => setForwarding(true)}>
          forward
        </button>
        <button className="link" data-testid="pin" onClick={() => attempt(() => onPin(!pinned))}>
          {pinned ? "unpin" : "pin"}
        </button>
        <button
          className="link"
          data-testid="save"
          disabled={saved}
          onClick={() => attempt(onSave).then((done) => done && setSaved(true))}
        >
          {saved ? "saved" : "save"}
        </button>
        {mine && !editing && (
          <>
            <button className="link" onClick={() => setEditing(true)}>
              edit
            </button>
            <button className="link" onClick={() => attempt(onDelete)}>
              delete
            </button>
          </>
        )}
        {!mine && !reporting && (
          <>
            <button className="link" data-testid="report" disabled={reported} onClick={() => setReporting(true)}>
              {reported ? "reported" : "report"}
            </button>
            {!message.senderBlockedByViewer && (
              <button className="link" data-testid="block" onClick={() => attempt(() => onBlock(true))}>
                block
              </button>
            )}
          </>
        )}
        {message.editedAt && (
          <span className="edited" data-testid="edited" title={new Date(message.editedAt).toLocaleString()}>
            edited
          </span>
        )}
        <time dateTime={message.createdAt}>{new Date(message.createdAt).toLocaleTimeString()}</time>
        {mine && <Ticks group={group} seenBy={seenBy} />}
      </span>
      {forwarding && (
        <ForwardForm
          conversations={conversations}
          onCancel={() => setForwarding(false)}
          onForward={(to) => attempt(() => onForward(to)).then((done) => done && setForwarding(false))}
        />
      )}
      {reporting && (
        <ReportForm
          onCancel={() => setReporting(false)}
          onReport={(reason) =>
            attempt(() => onReport(reason)).then((sent) => sent && (setReporting(false), setReported(true)))
          }
        />
      )}
      {error && <span className="error">{error}</span>}
    </li>
  );
}

// The reasons a report takes (the API's ReportReason), in words.
const REASONS = [
  ["SPAM", "spam"],
  ["HARASSMENT", "harassment or bullying"],
  ["HATE", "hate speech"],
  ["VIOLENCE", "threats or violence"],
  ["SEXUAL", "sexual content"],
  ["SELF_HARM", "self-harm"],
  ["ILLEGAL", "something illegal"],
  ["IMPERSONATION", "impersonation"],
  ["OTHER", "something else"],
];

function ReportForm({ onReport, onCancel }) {
  const [reason, setReason] = useState("SPAM");
  function submit(event) {
    event.preventDefault();
    onReport(reason);
  }
  return (
    <form className="report" onSubmit={submit} data-testid="report-form">
      <select name="reason" value={reason} onChange={(e) => setReason(e.target.value)} aria-label="Why report it">
        {REASONS.map(([value, words]) => (
          <option key={value} value={value}>
            {words}
          </option>
        ))}
      </select>
      <button type="submit">Report</button>
      <button type="button" className="link" onClick={onCancel}>
        cancel
      </button>
    </form>
  );
}

// An edit cannot empty a message (the server refuses a blank body): saving a cleared
// text says so and offers delete instead; one over the limit says the limit.
function EditForm({ body, maxBodyChars, onSave, onDelete, onCancel }) {
  const [draft, setDraft] = useState(body);
  const [problem, setProblem] = useState(null);
  function submit(event) {
    event.preventDefault();
    if (!draft.trim()) setProblem("empty");
    else if (maxBodyChars && [...draft].length > maxBodyChars) setProblem("long");
    else onSave(draft);
  }
  return (
    <form className="edit" onSubmit={submit}>
      <input
        name="edit"
        value={draft}
        onChange={(e) => (setDraft(e.target.value), setProblem(null))}
        aria-label="Edit message"
        aria-invalid={Boolean(problem)}
        autoFocus
        autoComplete="off"
      />
      <button type="submit">Save</button>
      <button type="button" className="link" onClick={onCancel}>
        cancel
      </button>
      {problem === "empty" && (
        <span className="error" role="alert" data-testid="edit-problem">
          A message cannot be empty: delete it instead?{" "}
          <button type="button" className="link" onClick={onDelete}>
            delete message
          </button>
        </span>
      )}
      {problem === "long" && (
        <span className="error" role="alert" data-testid="edit-problem">
          {[...draft].length.toLocaleString("en")} characters: a message holds at most{" "}
          {maxBodyChars.toLocaleString("en")}.
        </span>
      )}
    </form>
  );
}

// Direct: "seen" once the other person's watermark reaches the message. Group: "seen by N".
function Ticks({ group, seenBy }) {
  const text = !seenBy.length ? "sent" : group ? `seen by ${seenBy.length}` : "seen";
  return (
    <span className={`tick ${seenBy.length ? "seen" : ""}`} data-testid="tick" title={seenBy.length ? `users ${seenBy.join(", ")}` : ""}>
      {seenBy.length ? "✓✓" : "✓"} {text}
    </span>
  );
}

// Not acknowledged yet: "sending…" until the server answers. A failure shows its reason
// and can be discarded; a send that did not get through (the network, the server busy)
// also offers a retry with the same clientMsgId (stored at most once). One the server
// refused for what it is (too long, not a member) would be refused again: no retry.
export function PendingMessage({ pending, onRetry, onDiscard }) {
  return (
    <li className="message mine pending" data-testid="pending">
      <span className="body">{pending.body}</span>
      <span className="meta">
        {pending.failed ? (
          <>
            <span className="error" data-testid="send-error">
              not sent: {pending.error}
            </span>
            {pending.retryable && (
              <button className="link" onClick={onRetry}>
                retry
              </button>
            )}
            <button className="link" onClick={onDiscard}>
              discard
            </button>
          </>
        ) : (
          "sending…"
        )}
      </span>
    </li>
  );
}
