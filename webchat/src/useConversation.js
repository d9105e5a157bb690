// One open conversation: its newest page, older pages on demand, live messages and
// watermarks that resume after a dropped connection, sends with a pending state until
// the ack, markRead while the conversation is on screen, and edits, deletions and
// reactions, pins and unpins (messageChanged, resumed after a drop like messageNew).
import { useCallback, useEffect, useReducer, useRef } from "react";
import { run } from "./client.js";
import { conversationReducer, initialConversation } from "./conversation.js";
import { live } from "./live.js";
import {
  ADD_REACTION,
  BLOCK,
  DELETE,
  EDIT,
  FORWARD,
  HISTORY,
  MARK_READ,
  MESSAGE_CHANGED,
  MESSAGE_NEW,
  OLDER,
  PIN,
  PINNED,
  READ_UPDATED,
  REMOVE_REACTION,
  REPORT_MESSAGE,
  SAVE,
  SEND,
  UNBLOCK,
  UNPIN,
  TYPING,
  TYPING_EVENTS,
  WATERMARKS,
} from "./operations.js";

export const PAGE_SIZE = 20;
const TYPING_EVERY_MS = 3000; // the server shows "typing" for 5 s (CHATGQL_TYPING_SECONDS)
const TYPING_AT_MOST_MS = 10000; // never longer, whatever this browser's clock says

// A UUID v4 (crypto.randomUUID exists only on https and localhost pages).
function newClientMsgId() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = [...bytes].map((byte) => byte.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

export function useConversation(client, conversationId, viewerId) {
  const [state, dispatch] = useReducer(conversationReducer, initialConversation);
  const held = useRef(0); // the highest seq held: the resume cursor
  const changed = useRef(0); // the highest changeSeq held: messageChanged's resume cursor
  const read = useRef(0); // the highest seq this viewer marked read
  const typedAt = useRef(0); // when this viewer last said "typing"

  const markRead = useCallback(
    (seq) => {
      if (seq <= read.current || document.visibilityState === "hidden") return;
      read.current = seq;
      run(client, "mutation", MARK_READ, { c: conversationId, s: seq }).catch(() => {
        read.current = 0; // try again with the next message or reconnect
      });
    },
    [client, conversationId],
  );

  useEffect(() => {
    let stopped = false;
    const stops = [];
    held.current = 0;
    changed.current = 0;
    read.current = 0;

    const receive = (message) => {
      held.current = Math.max(held.current, message.seq);
      dispatch({ type: "message", message });
      if (message.senderId !== viewerId) markRead(message.seq);
    };

    async function load() {
      const data = await run(client, "query", HISTORY, { c: conversationId, last: PAGE_SIZE });
      if (stopped) return;
      if (!data.conversation) {
        dispatch({ type: "missing" });
        return false;
      }
      held.current = data.conversation.lastSeq;
      changed.current = data.conversation.lastChangeSeq;
      dispatch({ type: "history", conversation: data.conversation });
      markRead(data.conversation.lastSeq);
      return true;
    }

    async function start() {
      let found = false;
      for (let attempt = 0; !stopped; attempt++) {
        try {
          found = await load();
          break;
        } catch (error) {
          if (error.code === "NOT_FOUND" || error.code === "FORBIDDEN") {
            dispatch({ type: "missing" });
            break;
          }
          await new Promise((resolve) => setTimeout(resolve, Math.min(4000, 250 * 2 ** attempt)));
        }
      }
      if (stopped || !found) return;
      stops.push(
        live(
          client,
          MESSAGE_NEW,
          () => ({ c: conversationId, cursors: [{ conversationId, afterSeq: held.current }] }),
          (data) => receive(data.messageNew.message),
          {
            // Too far behind to replay: start again from the newest page.
            onRestart: ({ reason }) => reason === "REPLAY_TOO_LONG" && load().catch(() => {}),
          },
        ),
        live(
          client,
          MESSAGE_CHANGED,
          () => ({ c: conversationId, cursors: [{ conversationId, afterChangeSeq: changed.current }] }),
          ({ messageChanged: { changeSeq, kind, message } }) => {
            changed.current = Math.max(changed.current, changeSeq);
            dispatch({ type: "changed", message, changeSeq, kind });
          },
          { onRestart: ({ reason }) => reason === "REPLAY_TOO_LONG" && load().catch(() => {}) },
        ),
        live(client, TYPING_EVENTS, () => ({ c: conversationId }), ({ typing: { userId, until } }) => {
          const expires = Math.min(Date.parse(until), Date.now() + TYPING_AT_MOST_MS);
          dispatch({ type: "typing", userId, until: expires });
          setTimeout(() => dispatch({ type: "typingExpired", now: Date.now() }), expires - Date.now() + 50);
        }),
        live(
          client,
          READ_UPDATED,
          () => ({ c: conversationId }),
          (data) => dispatch({ type: "watermarks", members: [data.readUpdated] }),
          {
            // Watermark moves are not replayed: read them again (they only move forward).
            onRestart: () =>
              run(client, "query", WATERMARKS, { c: conversationId })
                .then((data) => dispatch({ type: "watermarks", members: data.conversation.members }))
                .catch(() => {}),
          },
        ),
      );
    }

    start();
    const onVisible = () => markRead(held.current);
    document.addEventListener("visibilitychange", onVisible);
    return () => {
      stopped = true;
      stops.forEach((stop) => stop());
      document.removeEventListener("visibilitychange", onVisible);
    };
  }, [client, conversationId, viewerId, markRead]);

  // The pinned list: read once the history is in, and again each time pinsVersion moves (a pin or an
  // unpin from any member, the answer to the viewer's own, a history reloaded). A failed read keeps the
  // list shown; the next pin change reads it again.
  useEffect(() => {
    if (!state.pinsVersion) return;
    let stopped = false;
    run(client, "query", PINNED, { c: conversationId }).then(
      (data) => stopped || dispatch({ type: "pins", pins: data.pinnedMessages }),
      () => {},
    );
    return () => {
      stopped = true;
    };
  }, [client, conversationId, state.pinsVersion]);

  const loadOlder = useCallback(async () => {
    if (!state.olderCursor) return;
    const data = await run(client, "query", OLDER, { c: conversationId, last: PAGE_SIZE, before: state.olderCursor });
    dispatch({ type: "older", page: data.messages });
  }, [client, conversationId, state.olderCursor]);

  // Send, or retry a failed send: the same clientMsgId, so a send whose ack was lost
  // is stored once (the server answers the original message, duplicate: true).
  const send = useCallback(
    async (body, clientMsgId = newClientMsgId(), quote = null) => {
      dispatch({ type: "sending", clientMsgId, body, quote });
      try {
        const data = await run(client, "mutation", SEND, { c: conversationId, m: clientMsgId, b: body, q: quote });
        // Not the resume cursor: messages before it may still be on their way live.
        dispatch({ type: "message", message: data.sendMessage.message });
      } catch (error) {
        dispatch({ type: "sendFailed", clientMsgId, error: error.message, code: error.code });
      }
    },
    [client, conversationId],
  );
  const discard = useCallback((clientMsgId) => dispatch({ type: "discard", clientMsgId }), []);

  // Edit, delete, react: the answer is shown at once (our own change also comes back on
  // messageChanged; the reducer keeps whichever is newer). A failure is thrown to the view.
  const change = useCallback(
    async (document, variables, kind = null) => {
      const data = await run(client, "mutation", document, { c: conversationId, ...variables });
      const { changeSeq, message } = Object.values(data)[0];
      if (changeSeq !== null) dispatch({ type: "changed", message, changeSeq, kind });
    },
    [client, conversationId],
  );
  const edit = useCallback((seq, body) => change(EDIT, { s: seq, b: body }), [change]);
  const remove = useCallback((seq) => change(DELETE, { s: seq }), [change]);
  const react = useCallback(
    (seq, emoji, on) => change(on ? ADD_REACTION : REMOVE_REACTION, { s: seq, e: emoji }),
    [change],
  );
  // Pin or unpin (who may: the server says; a refusal is thrown to the view like an edit's).
  const pin = useCallback(
    (seq, on) => change(on ? PIN : UNPIN, { s: seq }, on ? "PINNED" : "UNPINNED"),
    [change],
  );

  // While the viewer types: "typing" at most every few seconds (best effort, rate-limited).
  const typing = useCallback(() => {
    if (Date.now() - typedAt.current < TYPING_EVERY_MS) return;
    typedAt.current = Date.now();
    run(client, "mutation", TYPING, { c: conversationId }).catch(() => {});
  }, [client, conversationId]);

  // Block or unblock a sender; report a message. A failure is thrown to the view.
  const block = useCallback(
    async (userId, blocked) => {
      await run(client, "mutation", blocked ? BLOCK : UNBLOCK, { u: userId });
      dispatch({ type: "blocked", userId, blocked });
    },
    [client],
  );
  const report = useCallback(
    (seq, reason) => run(client, "mutation", REPORT_MESSAGE, { c: conversationId, s: seq, r: reason }),
    [client, conversationId],
  );

  // Forward a message into another conversation (a new message there; one clientMsgId for its
  // retries), save one to the viewer's list. A failure is thrown to the view.
  const forward = useCallback(
    (messageId, to) => run(client, "mutation", FORWARD, { id: messageId, c: to, m: newClientMsgId() }),
    [client],
  );
  const save = useCallback(
    (seq) => run(client, "mutation", SAVE, { c: conversationId, s: seq }),
    [client, conversationId],
  );

  return { state, loadOlder, send, discard, edit, remove, react, pin, typing, block, report, forward, save };
}
