import { useEffect, useRef, useState } from "react";
import { seenBy } from "./conversation.js";
import { conversationName } from "./Inbox.jsx";
import { Message, PendingMessage } from "./Message.jsx";
import { useConversation } from "./useConversation.js";

export function Conversation({ client, viewer, conversationId }) {
  const { state, loadOlder, send, edit, remove, react, typing } = useConversation(client, conversationId, viewer.userId);
  const [draft, setDraft] = useState("");
  const bottom = useRef(null);
  const newest = state.messages.length ? state.messages[state.messages.length - 1].seq : 0;
  useEffect(() => {
    bottom.current?.scrollIntoView({ block: "end" });
  }, [newest, state.pending.length]);

  if (!state.loaded) return <section className="conversation">Loading…</section>;
  const members = Object.keys(state.watermarks).map((userId) => ({ userId }));
  const group = state.conversation.type === "GROUP";

  function change(event) {
    setDraft(event.target.value);
    if (event.target.value) typing(); // the others see "typing…"
  }

  function submit(event) {
    event.preventDefault();
    if (!draft.trim()) return;
    send(draft);
    setDraft("");
  }

  return (
    <section className="conversation" data-testid="conversation" data-conversation-id={conversationId}>
      <header>
        <strong>{conversationName({ ...state.conversation, members }, viewer.userId)}</strong>
        <span className="members">{members.map((member) => member.userId).join(", ")}</span>
      </header>
      <ol className="messages">
        {state.hasOlder && (
          <li className="older">
            <button onClick={loadOlder}>Load older messages</button>
          </li>
        )}
        {state.messages.map((message) => (
          <Message
            key={message.seq}
            message={message}
            mine={message.senderId === viewer.userId}
            group={group}
            seenBy={seenBy(state, message)}
            onEdit={(body) => edit(message.seq, body)}
            onDelete={() => remove(message.seq)}
            onReact={(emoji, on) => react(message.seq, emoji, on)}
          />
        ))}
        {state.pending.map((pending) => (
          <PendingMessage key={pending.clientMsgId} pending={pending} onRetry={() => send(pending.body, pending.clientMsgId)} />
        ))}
        <li ref={bottom} className="bottom" />
      </ol>
      <Typing userIds={Object.keys(state.typing)} />
      <form className="composer" onSubmit={submit}>
        <input name="body" value={draft} onChange={change} placeholder="Message" autoComplete="off" />
        <button type="submit">Send</button>
      </form>
    </section>
  );
}

// "user 2 is typing…": the members whose typing event has not expired.
function Typing({ userIds }) {
  if (!userIds.length) return null;
  const who = userIds.map((userId) => `user ${userId}`).join(", ");
  return (
    <p className="typing" data-testid="typing">
      {who} {userIds.length === 1 ? "is" : "are"} typing…
    </p>
  );
}
