// The composer's text as a draft (docs/guide/drafts-and-presence.md): restored when the
// conversation opens, saved a moment after the typing stops, followed live from the viewer's
// other devices (draftUpdated), and dropped when a message of the viewer's after it arrives
// (the server clears it so, without a call).
import { useCallback, useEffect, useRef, useState } from "react";
import { run } from "./client.js";
import { live } from "./live.js";
import { DRAFT_UPDATED, DRAFTS, SAVE_DRAFT } from "./operations.js";

const SAVE_AFTER_MS = 800;

export function useDraft(client, conversationId, messages, viewerId) {
  const [text, setText] = useState("");
  const held = useRef({ version: 0, baseSeq: 0, body: "" }); // the newest draft known
  const timer = useRef(null);
  const dirty = useRef(false); // typed here and not saved yet

  const take = useCallback((draft) => {
    if (!draft || draft.replyTo !== null || draft.version <= held.current.version) return;
    held.current = { version: draft.version, baseSeq: draft.baseSeq, body: draft.body };
    if (!dirty.current) setText(draft.body);
  }, []);

  useEffect(() => {
    let stopped = false;
    held.current = { version: 0, baseSeq: 0, body: "" };
    dirty.current = false;
    setText("");
    run(client, "query", DRAFTS, { cs: [conversationId] })
      .then((data) => !stopped && take(data.drafts.find((d) => d.replyTo === null)))
      .catch(() => {});
    const stop = live(client, DRAFT_UPDATED, () => ({ c: conversationId }), (data) => take(data.draftUpdated));
    return () => {
      stopped = true;
      stop();
      clearTimeout(timer.current);
    };
  }, [client, conversationId, take]);

  // A message of the viewer's after the draft was saved clears it (on every device).
  const newestOwn = messages.reduce((seq, m) => (m.senderId === viewerId && !m.replyTo ? Math.max(seq, m.seq) : seq), 0);
  useEffect(() => {
    const draft = held.current;
    if (draft.body && newestOwn > draft.baseSeq) {
      held.current = { ...draft, body: "" };
      if (!dirty.current) setText("");
    }
  }, [newestOwn]);

  const change = useCallback(
    (value) => {
      setText(value);
      dirty.current = true;
      clearTimeout(timer.current);
      timer.current = setTimeout(() => {
        run(client, "mutation", SAVE_DRAFT, { c: conversationId, b: value })
          .then((data) => {
            dirty.current = false;
            if (data.saveDraft) held.current = { ...data.saveDraft };
          })
          .catch(() => {});
      }, SAVE_AFTER_MS);
    },
    [client, conversationId],
  );

  // The text was sent: nothing to save, and the send clears the draft on the server.
  const sent = useCallback(() => {
    clearTimeout(timer.current);
    dirty.current = false;
    setText("");
  }, []);

  return [text, change, sent];
}
