import { useEffect, useState } from "react";
import { run } from "./client.js";
import { PINNED } from "./operations.js";

// The conversation's pinned messages, the newest pin first (pinnedMessages): read when the
// conversation opens and again whenever `version` moves (conversation.js's pinsVersion: a PINNED or
// UNPINNED change from messageChanged, the answer to the viewer's own pin or unpin, a reloaded history).
// A failed read keeps what is shown; the next pin change reads again.
export function usePins(client, conversationId, version) {
  const [read, setRead] = useState({ conversationId: null, pins: [] });
  useEffect(() => {
    let stopped = false;
    run(client, "query", PINNED, { c: conversationId }).then(
      (data) => stopped || setRead({ conversationId, pins: data.pinnedMessages }),
      () => {},
    );
    return () => {
      stopped = true;
    };
  }, [client, conversationId, version]);
  return read.conversationId === conversationId ? read.pins : [];
}

// Above the history: each pinned message (its sender and body); a click shows the message in the
// history when it is held (scrolled to and highlighted), else says to load older messages.
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
