import { useState } from "react";

// Above the history: the conversation's pinned messages, the newest pin first (conversation.js holds
// them, useConversation.js reads them). A click shows the message in the history when it is held
// (scrolled to and highlighted), else says to load older messages.
export function PinnedList({ pins, held, onShow }) {
  const [notHeld, setNotHeld] = useState(null);
  if (!pins.length) return null;
  function show(seq) {
    if (held(seq)) onShow(seq);
    setNotHeld(held(seq) ? null : seq);
  }
  return (
    <section className="pins" data-testid="pins" aria-label="Pinned messages">
      <ol>
        {pins.map((pin) => (
          <li key={pin.seq} data-testid="pinned" data-seq={pin.seq}>
            <span aria-hidden="true">📌 </span>
            <button className="link" onClick={() => show(pin.seq)} title="show it in the conversation">
              <span className="sender">user {pin.message.senderId}</span>{" "}
              {pin.message.senderBlockedByViewer ? "a message from someone you blocked" : pin.message.body}
            </button>
            {notHeld === pin.seq && (
              <span className="hint" data-testid="pinned-not-held">
                {" "}
                (older than the messages shown: load older messages to see it)
              </span>
            )}
          </li>
        ))}
      </ol>
    </section>
  );
}
