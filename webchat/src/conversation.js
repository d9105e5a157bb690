// What one open conversation shows, as a pure reducer. Messages are kept by seq (the
// conversation's gap-free order), so a message that arrives twice (the send's ack and
// its live event, or a replay after a reconnect) is held once. Members' watermarks
// (lastReadSeq) only move forward; "seen" ticks follow from them. An edit, a deletion
// or a reaction replaces the message at its seq, unless a newer change of it is held.
//
// Typing is a member's state beside the watermarks: until when the indicator shows.
// The pinned list (Pins.jsx) is read from the server (pinnedMessages): a pin or an unpin moves pinsVersion,
// which reads it again; an edit, a deletion or a reaction of a pinned message changes the list here.
//
// A new event kind (a reply) is one more action here and one more
// subscription in useConversation.js; its view goes in Message.jsx.

export const initialConversation = {
  loaded: false,
  conversation: null, // { id, type, title, slowModeSeconds, messageTtlSeconds }
  messages: [], // ascending by seq
  hasOlder: false,
  olderCursor: null,
  watermarks: {}, // userId -> lastReadSeq
  changeSeqs: {}, // seq -> the changeSeq of the newest change held for that message
  typing: {}, // userId -> until when "typing…" shows (ms since the epoch, this browser's clock)
  pending: [], // sends not acknowledged yet: { clientMsgId, body, failed, error, retryable }
  pins: [], // the pinned messages, the newest pin first: { seq, pinnedBy, pinnedAt, message }
  pinsVersion: 0, // moves on each pin or unpin held, and on a history: useConversation.js reads the pins again
  missing: false, // the viewer cannot read it (not a member, or no such conversation)
};

// A send refused for what it is (too long, not a member, ...) fails the same way again:
// only a send that did not reach the server, or was turned away for now, is worth a retry.
const RETRYABLE = new Set(["NETWORK", "UNAVAILABLE", "RATE_LIMITED", "TIMEOUT", "INTERNAL_SERVER_ERROR"]);
export const retryable = (code) => RETRYABLE.has(code);

function bySeq(messages, incoming) {
  const held = new Map(messages.map((message) => [message.seq, message]));
  for (const message of incoming) held.set(message.seq, message);
  return [...held.values()].sort((a, b) => a.seq - b.seq);
}

function raise(watermarks, members) {
  const next = { ...watermarks };
  for (const { userId, lastReadSeq } of members) next[userId] = Math.max(next[userId] ?? 0, lastReadSeq);
  return next;
}

function without(typing, userId) {
  if (!(userId in typing)) return typing;
  const { [userId]: _, ...others } = typing;
  return others;
}

function withoutPending(pending, messages) {
  const stored = new Set(messages.map((message) => message.clientMsgId));
  return pending.filter((send) => !stored.has(send.clientMsgId));
}

export function conversationReducer(state, action) {
  switch (action.type) {
    case "history": {
      // The newest page (on open, or after a resync that skipped too much).
      const { conversation } = action;
      const messages = conversation.messages.nodes;
      return {
        ...state,
        loaded: true,
        conversation: {
          id: conversation.id,
          type: conversation.type,
          title: conversation.title,
          slowModeSeconds: conversation.slowModeSeconds,
          messageTtlSeconds: conversation.messageTtlSeconds,
        },
        messages,
        hasOlder: conversation.messages.pageInfo.hasPreviousPage,
        olderCursor: conversation.messages.pageInfo.startCursor,
        watermarks: raise({}, conversation.members),
        changeSeqs: {},
        pending: withoutPending(state.pending, messages),
        pinsVersion: state.pinsVersion + 1,
      };
    }
    case "older":
      return {
        ...state,
        messages: bySeq(state.messages, action.page.nodes),
        hasOlder: action.page.pageInfo.hasPreviousPage,
        olderCursor: action.page.pageInfo.startCursor,
      };
    case "message": // live, replayed after a reconnect, or the ack of our own send
      return {
        ...state,
        messages: bySeq(state.messages, [action.message]),
        pending: withoutPending(state.pending, [action.message]),
        typing: without(state.typing, action.message.senderId), // they sent it: done typing
      };
    case "changed": {
      // An edit, a deletion, a reaction, a pin or an unpin (live, replayed, or the answer to our
      // own call): the message as it is after it. An older change arriving late changes nothing.
      const { message, changeSeq, kind } = action;
      if ((state.changeSeqs[message.seq] ?? 0) >= changeSeq) return state;
      const pin = kind === "PINNED" || kind === "UNPINNED";
      return {
        ...state,
        messages: state.messages.map((held) => (held.seq === message.seq ? message : held)),
        changeSeqs: { ...state.changeSeqs, [message.seq]: changeSeq },
        pins: state.pins // a deleted message is no longer pinned
          .filter((item) => item.seq !== message.seq || !message.deletedAt)
          .map((item) => (item.seq === message.seq ? { ...item, message } : item)),
        pinsVersion: pin ? state.pinsVersion + 1 : state.pinsVersion,
      };
    }
    case "pins": // the pinned list as read (pinnedMessages)
      return { ...state, pins: action.pins };
    case "blocked": // the viewer blocked or unblocked a sender: their messages say so
      return {
        ...state,
        messages: state.messages.map((held) =>
          held.senderId === action.userId ? { ...held, senderBlockedByViewer: action.blocked } : held,
        ),
        pins: state.pins.map((item) =>
          item.message.senderId === action.userId
            ? { ...item, message: { ...item.message, senderBlockedByViewer: action.blocked } }
            : item,
        ),
      };
    case "typing":
      return { ...state, typing: { ...state.typing, [action.userId]: action.until } };
    case "typingExpired":
      return {
        ...state,
        typing: Object.fromEntries(Object.entries(state.typing).filter(([, until]) => until > action.now)),
      };
    case "watermarks":
      return { ...state, watermarks: raise(state.watermarks, action.members) };
    case "sending":
      return {
        ...state,
        pending: [
          ...state.pending.filter((send) => send.clientMsgId !== action.clientMsgId),
          { clientMsgId: action.clientMsgId, body: action.body, quote: action.quote ?? null, failed: false },
        ],
      };
    case "sendFailed":
      return {
        ...state,
        pending: state.pending.map((send) =>
          send.clientMsgId === action.clientMsgId
            ? { ...send, failed: true, error: action.error, retryable: retryable(action.code) }
            : send,
        ),
      };
    case "discard": // a failed send the person gave up on
      return { ...state, pending: state.pending.filter((send) => send.clientMsgId !== action.clientMsgId) };
    case "missing":
      return { ...state, loaded: true, missing: true };
    default:
      throw new Error(`unknown action ${action.type}`);
  }
}

// The highest seq held: where a resumed subscription starts.
export function highestSeq(state) {
  return state.messages.length ? state.messages[state.messages.length - 1].seq : 0;
}

// Who, other than its sender, has read a message: from the members' watermarks.
export function seenBy(state, message) {
  return Object.entries(state.watermarks)
    .filter(([userId, lastReadSeq]) => userId !== message.senderId && lastReadSeq >= message.seq)
    .map(([userId]) => userId);
}
