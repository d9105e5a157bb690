import { useEffect, useLayoutEffect, useRef, useState } from "react";
import { seenBy } from "./conversation.js";
import { conversationName } from "./Inbox.jsx";
import { Message, PendingMessage } from "./Message.jsx";
import { PinnedList } from "./Pins.jsx";
import { Presence } from "./Presence.jsx";
import { Quoting } from "./Quote.jsx";
import { Schedule, ttlLabel } from "./Schedule.jsx";
import { useConversation } from "./useConversation.js";
import { useDraft } from "./useDraft.js";

// How close to the bottom (px) still counts as "at the newest message".
const AT_BOTTOM_PX = 48;

// Scrolled up from the newest messages by more than the `arrived` last ones take.
function readingOlder(element, arrived) {
  if (!element) return false;
  const items = element.querySelectorAll("[data-testid=message]");
  let added = 0;
  for (let i = Math.max(0, items.length - arrived); i < items.length; i++) added += items[i].offsetHeight + AT_BOTTOM_PX;
  return element.scrollHeight - element.scrollTop - element.clientHeight > added;
}

export function Conversation({ client, viewer, config, conversationId, conversations = [], onBack, onOpenThread }) {
  const { state, loadOlder, send, discard, edit, remove, react, pin, typing, block, report, forward, save } =
    useConversation(client, conversationId, viewer.userId);
  const [highlighted, setHighlighted] = useState(null); // the pinned message last shown from the list
  const [draft, setDraft, draftSent] = useDraft(client, conversationId, state.messages, viewer.userId);
  const [quoting, setQuoting] = useState(null); // the message the next send quotes
  const list = useRef(null);
  const bottom = useRef(null);
  // Following the newest message (at the bottom), or reading older ones: then a new
  // message does not move the view, it shows the "new messages" button instead.
  const following = useRef(true);
  const [unseen, setUnseen] = useState(0);
  const newestMessage = state.messages.length ? state.messages[state.messages.length - 1] : null;
  const newest = newestMessage ? newestMessage.seq : 0;
  const shown = useRef(0);

  useLayoutEffect(() => {
    const arrived = newest - shown.current;
    shown.current = newest;
    if (arrived <= 0) return;
    // The scroll event of a scroll made just before the message came may not have run yet:
    // the list's own position decides too (how far above the bottom, less what just arrived).
    if (following.current && readingOlder(list.current, arrived)) following.current = false;
    if (following.current || newestMessage.senderId === viewer.userId) {
      bottom.current?.scrollIntoView({ block: "end" });
      setUnseen(0);
    } else {
      setUnseen((count) => count + arrived);
    }
  }, [newest]); // eslint-disable-line react-hooks/exhaustive-deps
  useLayoutEffect(() => {
    if (state.pending.length) toNewest(); // one's own send: show it
  }, [state.pending.length]); // eslint-disable-line react-hooks/exhaustive-deps

  function toNewest() {
    bottom.current?.scrollIntoView({ block: "end" });
    following.current = true;
    setUnseen(0);
  }

  function showPinned(seq) {
    list.current?.querySelector(`[data-testid=message][data-seq="${seq}"]`)?.scrollIntoView({ block: "center" });
    setHighlighted(seq);
  }

  function scrolled() {
    const element = list.current;
    following.current = element.scrollHeight - element.scrollTop - element.clientHeight < AT_BOTTOM_PX;
    if (following.current) setUnseen(0);
  }

  const back = (
    <button className="back" onClick={onBack} aria-label="Back to the inbox" data-testid="back">
      ←
    </button>
  );
  if (!state.loaded) {
    return (
      <section className="conversation">
        <header>{back}</header>
        <p className="loading">Loading…</p>
      </section>
    );
  }
  if (state.missing) {
    return (
      <section className="conversation" data-testid="conversation-missing">
        <header>{back}</header>
        <p className="loading">This conversation is not yours to read (or no longer exists).</p>
      </section>
    );
  }
  const members = Object.keys(state.watermarks).map((userId) => ({ userId }));
  const group = state.conversation.type === "GROUP";
  const name = conversationName({ ...state.conversation, members }, viewer.userId);
  const length = [...draft].length; // characters as the server counts them (code points)
  const tooLong = config.maxBodyChars && length > config.maxBodyChars;

  function change(event) {
    setDraft(event.target.value);
    if (event.target.value) typing(); // the others see "typing…"
  }

  function submit(event) {
    event.preventDefault();
    if (!draft.trim() || tooLong) return;
    send(draft, undefined, quoting?.id ?? null);
    draftSent();
    setQuoting(null);
  }

  return (
    <section className="conversation" data-testid="conversation" data-conversation-id={conversationId}>
      <header>
        {back}
        <strong className="title" title={name} data-testid="conversation-title">
          {name}
        </strong>
        <span className="members" title={members.map((member) => member.userId).join(", ")}>
          {members.map((member) => member.userId).join(", ")}
        </span>
        {!group && members.some((member) => member.userId !== viewer.userId) && (
          <Presence client={client} userId={members.find((member) => member.userId !== viewer.userId).userId} />
        )}
        {state.conversation?.slowModeSeconds > 0 && (
          // Slow mode: a member sends one message every so many seconds; a send too soon is
          // refused with the wait (LIMIT_EXCEEDED, SLOW_MODE), shown on the unsent message.
          <span className="slow-mode" data-testid="slow-mode" title="slow mode">
            slow mode: {state.conversation.slowModeSeconds} s
          </span>
        )}
        {state.conversation?.messageTtlSeconds > 0 && (
          // Disappearing messages: each message is erased this long after it was sent (a tombstone).
          <span className="disappearing" data-testid="disappearing" title="disappearing messages">
            ⏳ {ttlLabel(state.conversation.messageTtlSeconds)}
          </span>
        )}
      </header>
      <PinnedList
        pins={state.pins}
        held={(seq) => state.messages.some((message) => message.seq === seq)}
        onShow={showPinned}
      />
      <ol className="messages" ref={list} onScroll={scrolled} data-testid="messages">
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
            maxBodyChars={config.maxBodyChars}
            seenBy={seenBy(state, message)}
            onEdit={(body) => edit(message.seq, body)}
            onDelete={() => remove(message.seq)}
            onReact={(emoji, on) => react(message.seq, emoji, on)}
            pinned={state.pins.some((item) => item.seq === message.seq)}
            highlighted={highlighted === message.seq}
            onPin={(on) => pin(message.seq, on)}
            onBlock={(blocked) => block(message.senderId, blocked)}
            onReport={(reason) => report(message.seq, reason)}
            onThread={onOpenThread && (() => onOpenThread(message.id))}
            onQuote={() => setQuoting(message)}
            onForward={(to) => forward(message.id, to)}
            onSave={() => save(message.seq)}
            conversations={conversations.filter((other) => other.id !== conversationId)}
          />
        ))}
        {state.pending.map((pending) => (
          <PendingMessage
            key={pending.clientMsgId}
            pending={pending}
            onRetry={() => send(pending.body, pending.clientMsgId, pending.quote)}
            onDiscard={() => discard(pending.clientMsgId)}
          />
        ))}
        <li ref={bottom} className="bottom" />
      </ol>
      {unseen > 0 && (
        <button className="new-messages" data-testid="new-messages" onClick={toNewest}>
          {unseen} new {unseen === 1 ? "message" : "messages"} ↓
        </button>
      )}
      <Typing userIds={Object.keys(state.typing)} />
      {tooLong && (
        <p className="over-limit error" role="alert" data-testid="over-limit">
          {length.toLocaleString("en")} characters: a message holds at most {config.maxBodyChars.toLocaleString("en")}.
          Shorten it or send it in parts.
        </p>
      )}
      <Quoting message={quoting} onCancel={() => setQuoting(null)} />
      <form className="composer" onSubmit={submit}>
        <input
          name="body"
          value={draft}
          onChange={change}
          placeholder="Message"
          aria-label="Message"
          aria-invalid={Boolean(tooLong)}
          autoComplete="off"
        />
        <button type="submit" disabled={Boolean(tooLong)}>
          Send
        </button>
      </form>
      <Schedule
        client={client}
        conversationId={conversationId}
        draft={draft}
        disabled={Boolean(tooLong)}
        onScheduled={() => setDraft("")}
      />
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
