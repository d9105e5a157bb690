// A quoted message inside a message, as the viewer may read it: its sender and body, "deleted" for a
// tombstone, and nothing of it when the viewer may not read it (Message.quote's state UNAVAILABLE).
export function QuoteBlock({ quote }) {
  if (!quote) return null;
  if (quote.state === "UNAVAILABLE") {
    return (
      <blockquote className="quote unavailable" data-testid="quote" data-state="UNAVAILABLE">
        a message you cannot see
      </blockquote>
    );
  }
  if (quote.state === "DELETED") {
    return (
      <blockquote className="quote deleted" data-testid="quote" data-state="DELETED">
        message deleted
      </blockquote>
    );
  }
  return (
    <blockquote className="quote" data-testid="quote" data-state="VISIBLE">
      <span className="sender">user {quote.message.senderId}</span> {quote.message.body}
    </blockquote>
  );
}

// Above the composer while quoting: what the next message will quote, and a way to drop it.
export function Quoting({ message, onCancel }) {
  if (!message) return null;
  return (
    <p className="quoting" data-testid="quoting">
      quoting user {message.senderId}: {message.body}{" "}
      <button className="link" onClick={onCancel}>
        cancel
      </button>
    </p>
  );
}

// Where to forward a message: one of the viewer's other conversations.
export function ForwardForm({ conversations, onForward, onCancel }) {
  const choices = conversations;
  function submit(event) {
    event.preventDefault();
    const to = new FormData(event.target).get("to");
    if (to) onForward(to);
  }
  return (
    <form className="forward" onSubmit={submit} data-testid="forward-form">
      <select name="to" aria-label="Forward to">
        {choices.map((conversation) => (
          <option key={conversation.id} value={conversation.id}>
            {conversation.title || `conversation ${conversation.id}`}
          </option>
        ))}
      </select>
      <button type="submit" disabled={!choices.length}>
        Forward
      </button>
      <button type="button" className="link" onClick={onCancel}>
        cancel
      </button>
    </form>
  );
}
