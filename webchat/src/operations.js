// Every GraphQL document the web chat sends, in one place. A new feature adds its
// documents here (and a case to conversation.js's reducer for what its events change).
import { gql } from "@urql/core";

export const VIEWER = gql`
  query Viewer {
    viewer { userId totalUnread unreadConversations }
  }
`;

export const INBOX = gql`
  query Inbox {
    viewer { userId totalUnread unreadConversations }
    inbox(first: 50) {
      nodes {
        id type title lastSeq unreadCount
        members { userId }
        lastMessage { seq senderId body deletedAt }
      }
    }
  }
`;

// A message as the views show it: its body, whether it was edited or deleted (a
// tombstone), and its reactions (the count per emoji, and whether the viewer is among them).
// forwarded and quote: a forwarded copy, and the message it quotes as this viewer may read it
// (VISIBLE, DELETED: its tombstone, UNAVAILABLE: nothing of it).
const MESSAGE_FIELDS = `id seq senderId clientMsgId body createdAt editedAt deletedAt senderBlockedByViewer reactions { emoji count reactedByViewer } forwarded quote { state message { senderId body deletedAt } }`;

// The newest page of a conversation, its members' watermarks (for the "seen" ticks)
// and its lastSeq and lastChangeSeq (where the live subscriptions resume).
export const HISTORY = gql`
  query History($c: ID!, $last: Int!) {
    conversation(id: $c) {
      id type title lastSeq lastChangeSeq lastReadSeq slowModeSeconds messageTtlSeconds
      members { userId lastReadSeq }
      messages(last: $last) {
        nodes { ${MESSAGE_FIELDS} }
        pageInfo { hasPreviousPage startCursor }
      }
    }
  }
`;

// An older page: the messages before the oldest one held.
export const OLDER = gql`
  query Older($c: ID!, $last: Int!, $before: String!) {
    messages(conversationId: $c, last: $last, before: $before) {
      nodes { ${MESSAGE_FIELDS} }
      pageInfo { hasPreviousPage startCursor }
    }
  }
`;

// The watermarks again, after a dropped connection (readUpdated has no replay).
export const WATERMARKS = gql`
  query Watermarks($c: ID!) {
    conversation(id: $c) { id lastSeq members { userId lastReadSeq } }
  }
`;

export const SEND = gql`
  mutation Send($c: ID!, $m: UUID!, $b: String!, $q: ID) {
    sendMessage(conversationId: $c, clientMsgId: $m, body: $b, quote: $q) {
      duplicate
      message { ${MESSAGE_FIELDS} }
    }
  }
`;

// A message sent later, at sendAt (Schedule.jsx); it arrives as any message does when it is sent.
export const SCHEDULE = gql`
  mutation Schedule($c: ID!, $m: UUID!, $b: String!, $at: DateTime!) {
    scheduleMessage(conversationId: $c, clientMsgId: $m, body: $b, sendAt: $at) {
      scheduledMessage { id state sendAt }
    }
  }
`;

export const MARK_READ = gql`
  mutation MarkRead($c: ID!, $s: Long!) {
    markRead(conversationId: $c, seq: $s) { lastReadSeq unreadCount advanced }
  }
`;

// Edits, deletions and reactions answer the message as it is after the call, and the
// changeSeq the call took (null when it changed nothing).
export const EDIT = gql`
  mutation Edit($c: ID!, $s: Long!, $b: String!) {
    editMessage(conversationId: $c, seq: $s, body: $b) { changeSeq message { ${MESSAGE_FIELDS} } }
  }
`;

export const DELETE = gql`
  mutation Delete($c: ID!, $s: Long!) {
    deleteMessage(conversationId: $c, seq: $s) { changeSeq message { ${MESSAGE_FIELDS} } }
  }
`;

export const ADD_REACTION = gql`
  mutation AddReaction($c: ID!, $s: Long!, $e: String!) {
    addReaction(conversationId: $c, seq: $s, emoji: $e) { changeSeq message { ${MESSAGE_FIELDS} } }
  }
`;

// Moderation: block or unblock a user (the viewer's own list), report a message.
export const BLOCK = gql`
  mutation Block($u: ID!) {
    blockUser(userId: $u) { userId blocked }
  }
`;

export const UNBLOCK = gql`
  mutation Unblock($u: ID!) {
    unblockUser(userId: $u) { userId blocked }
  }
`;

export const REPORT_MESSAGE = gql`
  mutation ReportMessage($c: ID!, $s: Long!, $r: ReportReason!) {
    reportMessage(conversationId: $c, seq: $s, reason: $r) { reportId duplicate }
  }
`;

export const REMOVE_REACTION = gql`
  mutation RemoveReaction($c: ID!, $s: Long!, $e: String!) {
    removeReaction(conversationId: $c, seq: $s, emoji: $e) { changeSeq message { ${MESSAGE_FIELDS} } }
  }
`;

// "I am typing": the others see it until `until` (a few seconds) unless it comes again.
export const TYPING = gql`
  mutation Typing($c: ID!) {
    typing(conversationId: $c) { until }
  }
`;

export const CREATE_DIRECT = gql`
  mutation CreateDirect($u: ID!) {
    createDirectConversation(userId: $u) { id }
  }
`;

export const CREATE_GROUP = gql`
  mutation CreateGroup($title: String!, $members: [ID!]!) {
    createGroup(title: $title, memberIds: $members) { id }
  }
`;

// Live messages of one conversation, resuming after the seq the client holds: first
// what came after the cursor (from the database), then live, no gap, no duplicate.
export const MESSAGE_NEW = gql`
  subscription MessageNew($c: ID!, $cursors: [SyncCursor!]) {
    messageNew(conversationId: $c, cursors: $cursors) {
      conversationId seq
      message { ${MESSAGE_FIELDS} }
    }
  }
`;

// Edits, deletions and reactions of one conversation, resuming after the changeSeq the
// client holds, like messageNew after its seq: each with the message as it is now.
export const MESSAGE_CHANGED = gql`
  subscription MessageChanged($c: ID!, $cursors: [ChangeCursor!]) {
    messageChanged(conversationId: $c, cursors: $cursors) {
      conversationId changeSeq kind seq
      message { ${MESSAGE_FIELDS} }
    }
  }
`;

// Other members typing (never the viewer): ephemeral, no replay.
export const TYPING_EVENTS = gql`
  subscription TypingEvents($c: ID!) {
    typing(conversationId: $c) { conversationId userId until }
  }
`;

export const READ_UPDATED = gql`
  subscription ReadUpdated($c: ID!) {
    readUpdated(conversationId: $c) { conversationId userId lastReadSeq }
  }
`;

// Anything in any of the viewer's conversations: the inbox reloads on these.
export const INBOX_MESSAGES = gql`
  subscription InboxMessages {
    messageNew { conversationId seq }
  }
`;

// Edits and deletions change the last message shown, deletions the unread counts.
export const INBOX_CHANGES = gql`
  subscription InboxChanges {
    messageChanged { conversationId changeSeq }
  }
`;

export const INBOX_READS = gql`
  subscription InboxReads {
    readUpdated { conversationId userId lastReadSeq }
  }
`;

// Threads (docs/guide/threads.md): the viewer's followed threads with their unread, one thread with its
// replies, a reply sent to the thread only, reading a thread, and the live thread updates.
export const MY_THREADS = gql`
  query MyThreads {
    viewer { threadUnread unreadThreads }
    myThreads(first: 50) {
      nodes { conversationId rootSeq unreadCount lastReplySeq root { id senderId body } lastReply { senderId body } }
    }
  }
`;

export const THREAD = gql`
  query Thread($r: ID!) {
    thread(rootId: $r) {
      conversationId rootSeq lastReplySeq lastReadReplySeq unreadCount following
      root { ${MESSAGE_FIELDS} }
      replies(first: 200) { replySeq message { ${MESSAGE_FIELDS} } }
    }
  }
`;

export const SEND_THREAD_REPLY = gql`
  mutation SendThreadReply($c: ID!, $m: UUID!, $b: String!, $r: ID!) {
    sendMessage(conversationId: $c, clientMsgId: $m, body: $b, replyTo: $r, threadOnly: true) { message { seq } }
  }
`;

export const MARK_THREAD_READ = gql`
  mutation MarkThreadRead($r: ID!, $s: Long!) {
    markThreadRead(rootId: $r, replySeq: $s) { lastReadReplySeq unreadCount }
  }
`;

export const FOLLOW_THREAD = gql`
  mutation FollowThread($r: ID!) {
    followThread(rootId: $r) { following }
  }
`;

export const UNFOLLOW_THREAD = gql`
  mutation UnfollowThread($r: ID!) {
    unfollowThread(rootId: $r) { following }
  }
`;

export const THREAD_UPDATED = gql`
  subscription ThreadUpdated {
    threadUpdated { conversationId rootSeq rootId change lastReplySeq unreadCount }
  }
`;

// Drafts (docs/guide/drafts-and-presence.md): the viewer's unsent text, on all of their devices.
const DRAFT_FIELDS = "conversationId replyTo body baseSeq version";

export const DRAFTS = gql`
  query Drafts($cs: [ID!]) {
    drafts(conversationIds: $cs) { ${DRAFT_FIELDS} }
  }
`;

export const SAVE_DRAFT = gql`
  mutation SaveDraft($c: ID!, $b: String!) {
    saveDraft(conversationId: $c, body: $b) { ${DRAFT_FIELDS} }
  }
`;

export const DRAFT_UPDATED = gql`
  subscription DraftUpdated($c: ID) {
    draftUpdated(conversationId: $c) { ${DRAFT_FIELDS} }
  }
`;

// Presence: whether a user is online, and when they were last seen, as they let the viewer see it.
export const PRESENCE_CHANGED = gql`
  subscription PresenceChanged($u: [ID!]!) {
    presenceChanged(userIds: $u) { userId visible online lastSeenAt }
  }
`;

// Forward a message (by its id) into another conversation of the viewer's: a new message there.
export const FORWARD = gql`
  mutation Forward($id: ID!, $c: ID!, $m: UUID!) {
    forwardMessage(messageId: $id, conversationId: $c, clientMsgId: $m) { duplicate message { conversationId seq } }
  }
`;

// Pinned messages (Pins.jsx): the conversation's list, the newest pin first, and pin / unpin, which answer
// the message and the changeSeq they took like an edit (their MessageChange kinds: PINNED, UNPINNED).
export const PINNED = gql`
  query Pinned($c: ID!) {
    pinnedMessages(conversationId: $c) { seq pinnedBy pinnedAt message { ${MESSAGE_FIELDS} } }
  }
`;

export const PIN = gql`
  mutation Pin($c: ID!, $s: Long!) {
    pinMessage(conversationId: $c, seq: $s) { changeSeq message { ${MESSAGE_FIELDS} } }
  }
`;

export const UNPIN = gql`
  mutation Unpin($c: ID!, $s: Long!) {
    unpinMessage(conversationId: $c, seq: $s) { changeSeq message { ${MESSAGE_FIELDS} } }
  }
`;

// Saved messages: the viewer's own list, newest save first.
export const SAVE = gql`
  mutation Save($c: ID!, $s: Long!) {
    saveMessage(conversationId: $c, seq: $s) { changed saved { seq version } }
  }
`;

export const UNSAVE = gql`
  mutation Unsave($c: ID!, $s: Long!) {
    unsaveMessage(conversationId: $c, seq: $s) { changed }
  }
`;

export const SAVED = gql`
  query Saved($after: String) {
    savedMessages(first: 50, after: $after) {
      nodes { conversationId seq savedAt remindAt message { senderId body } }
      hasNextPage endCursor version
    }
  }
`;

// The viewer's saves and unsaves from any of their devices: the saved list reloads on these.
export const SAVED_CHANGED = gql`
  subscription SavedChanged {
    savedMessageChanged { conversationId seq version saved }
  }
`;
