"""The fault suite's checks catch what they claim to catch (no servers needed).

A clean record passes; each broken promise, planted in an otherwise clean
record, is reported.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from ..support.load import (
    ChangeAck,
    Load,
    OwnAck,
    OwnState,
    ReadAck,
    ReadStorm,
    SendAck,
    StormRead,
    Subscriber,
    WatermarkMonitor,
)
from .scenario import ChangeState, Result, check, check_changes, check_own_state, check_storm

CID = "1"
WATCHER = 100


class Record:
    """What one scenario gathered: the clients' record and the database's state."""

    def __init__(self) -> None:
        self.load = Load(None, [1], [CID])  # type: ignore[arg-type]
        self.subscriber = Subscriber("ws://unused", "Bearer unused")
        self.monitor = WatermarkMonitor(None)  # type: ignore[arg-type]
        self.monitor.samples = 1
        self.stored: list[dict] = []
        for seq in (1, 2, 3):
            cmid = f"00000000-0000-4000-8000-00000000000{seq}"
            body = f"u1 {seq}"
            self.load.stats.sent += 1
            self.load.acks.append(SendAck(CID, cmid, 1, body, seq, False, 1))
            message = {"conversationId": CID, "seq": seq, "senderId": "1", "clientMsgId": cmid, "body": body}
            self.stored.append(message)
            self.subscriber.events.append(dict(message))
        self.load.reads.append(ReadAck(1, CID, 2, 2, False))
        self.load.reads.append(ReadAck(1, CID, 9, 3, False))
        self.last_seqs = {1: 3}
        self.watermarks = {(1, 1): 3, (1, WATCHER): 0}
        self.fetched: list[dict] = []
        self.outbox_end = 0

    def result(self) -> Result:
        result = Result("synthetic")
        result.outbox_end = self.outbox_end
        check(
            result, self.load, self.subscriber, self.monitor, self.stored, self.last_seqs, self.watermarks, self.fetched
        )
        return result


def test_a_clean_record_passes_and_is_counted() -> None:
    record = Record()
    record.subscriber.events.insert(2, dict(record.stored[1]))  # redelivered: deduped, counted
    result = record.result()
    assert result.failures == []
    assert (result.sent, result.acked, result.stored, result.delivered, result.duplicates, result.via_sync) == (
        3,
        3,
        3,
        3,
        1,
        0,
    )


def test_what_the_live_path_missed_is_recovered_by_sync_after_a_drop() -> None:
    record = Record()
    missed = record.subscriber.events.pop(1)
    record.subscriber.disconnects = 1
    record.fetched = [dict(missed), dict(record.stored[2])]  # sync from the end of the contiguous run
    result = record.result()
    assert result.failures == []
    assert (result.delivered, result.via_sync) == (2, 1)


def lose_an_acknowledged_message(r: Record) -> None:
    del r.stored[1]


def store_a_message_twice(r: Record) -> None:
    r.stored.append({**r.stored[0], "seq": 4})
    r.last_seqs[1] = 4
    r.subscriber.events.append({**r.stored[0], "seq": 4})


def leave_a_seq_gap(r: Record) -> None:
    r.last_seqs[1] = 4


def acknowledge_another_seq(r: Record) -> None:
    r.load.acks[2].seq = 7


def leave_a_message_unacknowledged(r: Record) -> None:
    r.load.stats.unacked.append("never-acked")


def refuse_a_valid_request(r: Record) -> None:
    r.load.stats.refusals.append("sendMessage x: CONFLICT")


def push_out_of_order(r: Record) -> None:
    events = r.subscriber.events
    events[1], events[2] = events[2], events[1]


def push_two_bodies_for_one_seq(r: Record) -> None:
    r.subscriber.events.append({**r.stored[0], "body": "something else"})


def miss_live_while_connected(r: Record) -> None:
    r.fetched = [dict(r.subscriber.events.pop())]


def miss_for_good(r: Record) -> None:
    r.subscriber.events.pop()
    r.subscriber.disconnects = 1


def sync_something_not_stored(r: Record) -> None:
    r.fetched = [{**r.stored[2], "seq": 4}]


def move_a_watermark_back(r: Record) -> None:
    r.watermarks[(1, 1)] = 2


def answer_a_lower_watermark(r: Record) -> None:
    r.load.reads.append(ReadAck(1, CID, 3, 1, False))


def sample_a_regression(r: Record) -> None:
    r.monitor.regressions.append("watermark (1, 1) went from 3 to 2")


def leave_the_outbox_full(r: Record) -> None:
    r.outbox_end = 12


@pytest.mark.parametrize(
    "breakage",
    [
        lose_an_acknowledged_message,
        store_a_message_twice,
        leave_a_seq_gap,
        acknowledge_another_seq,
        leave_a_message_unacknowledged,
        refuse_a_valid_request,
        push_out_of_order,
        push_two_bodies_for_one_seq,
        miss_live_while_connected,
        miss_for_good,
        sync_something_not_stored,
        move_a_watermark_back,
        answer_a_lower_watermark,
        sample_a_regression,
        leave_the_outbox_full,
    ],
)
def test_each_broken_promise_is_reported(breakage: Callable[[Record], None]) -> None:
    record = Record()
    breakage(record)
    clean = copy.deepcopy(Record().result())
    assert clean.failures == []
    assert record.result().failures, f"{breakage.__name__} went unnoticed"


# --- the read storm's check (scenario.check_storm) -------------------------------------------


def storm_record() -> tuple[ReadStorm, dict[tuple[int, int], int]]:
    """Two devices of user 7 in conversation 1: answers 2, 3 (overlapping), then 3 again."""
    storm = ReadStorm(None, [7], 2, [CID], Load(None, [1], [CID]))  # type: ignore[arg-type]
    storm.reads += [
        StormRead(7, CID, asked=2, seen=3, sent_at=0.0, received_at=2.0, last_read_seq=2),
        StormRead(7, CID, asked=5, seen=3, sent_at=1.0, received_at=1.5, last_read_seq=3),  # clamped to 3
        StormRead(7, CID, asked=1, seen=3, sent_at=3.0, received_at=3.5, last_read_seq=3),  # stale ask
    ]
    return storm, {(1, 7): 3}


def test_a_clean_read_storm_passes() -> None:
    storm, watermarks = storm_record()
    result = Result("synthetic")
    check_storm(result, storm, watermarks)
    assert result.failures == []


@pytest.mark.parametrize(
    "plant",
    [
        "answered above the final watermark",
        "answered below the clamped ask",
        "answered less than an earlier answer",
        "refused",
    ],
)
def test_the_read_storm_check_reports_each_broken_promise(plant: str) -> None:
    storm, watermarks = storm_record()
    if plant == "answered above the final watermark":
        watermarks[(1, 7)] = 2  # the answered 3 was not durable
    elif plant == "answered below the clamped ask":
        storm.reads[1].last_read_seq = 2  # asked 5 of a lastSeq of 3: at least 3
    elif plant == "answered less than an earlier answer":
        storm.reads.append(StormRead(7, CID, asked=0, seen=3, sent_at=4.0, received_at=4.5, last_read_seq=2))
    else:
        storm.stats.refusals.append("markRead 1 2: NOT_FOUND")
    result = Result("synthetic")
    check_storm(result, storm, watermarks)
    assert result.failures, plant


# --- the changes' and own read state's checks (scenario.check_changes, check_own_state) -------


def changes_record() -> tuple[Load, OwnState, ChangeState]:
    """User 1 edited message 1 (change 1), reacted to message 2 (change 2; adding it again changed
    nothing), deleted message 3 (change 3); the watcher rewound to seq 1 and marked seq 3 delivered."""
    load = Record().load
    load.stats.changes_sent = 4
    load.changes += [
        ChangeAck(1, CID, 1, "edit", "u1 1 e1", 1, 1),
        ChangeAck(1, CID, 2, "react", "👍", 2, 1),
        ChangeAck(1, CID, 2, "react", "👍", None, 1, effective=False),
        ChangeAck(1, CID, 3, "delete", "", None, 2),  # the cut-off first attempt did it
    ]
    state = ChangeState(
        last_change_seqs={CID: 3},
        log={(CID, 1): (1, "EDITED", 1), (CID, 2): (2, "REACTION", 1), (CID, 3): (3, "DELETED", 1)},
        messages={
            (CID, 1): {"body": "u1 1 e1", "edited": True, "deleted": False, "deleted_by": None},
            (CID, 2): {"body": "u1 2", "edited": False, "deleted": False, "deleted_by": None},
            (CID, 3): {"body": "", "edited": False, "deleted": True, "deleted_by": 1},
        },
        edits={(CID, 1): ["u1 1"]},
        reactions={(CID, 2, 1, "👍")},
        counts={(CID, 2, "👍"): 1},
        own={(CID, WATCHER): {"lastReadSeq": 0, "deliveredSeq": 3, "muted": True, "archived": False, "pinned": False}},
    )
    own = OwnState(None, WATCHER, [CID], load)  # type: ignore[arg-type]
    own.acks += [
        OwnAck("markUnread", CID, {"c": CID, "s": 1}, {"lastReadSeq": 0, "muted": False}),
        OwnAck("markDelivered", CID, {"c": CID, "s": 3}, {"deliveredSeq": 3}),
        OwnAck("updateMembership", CID, {"c": CID, "muted": True}, {"lastReadSeq": 0, "muted": True}),
    ]
    return load, own, state


def checked(load: Load, own: OwnState, state: ChangeState) -> Result:
    result = Result("synthetic")
    check_changes(result, load, state)
    check_own_state(result, own, state)
    return result


def test_clean_changes_and_own_read_state_pass() -> None:
    result = checked(*changes_record())
    assert result.failures == []
    assert (result.changes_acked, result.change_seqs, result.change_gaps, result.own_calls) == (4, 3, 0, 3)


@pytest.mark.parametrize(
    "plant",
    [
        "an edit lost",
        "an edit applied twice",
        "a change seq gap",
        "a change seq holding another change",
        "a reaction applied twice",
        "a reaction count off",
        "a reaction lost",
        "a delete lost",
        "a change never acknowledged",
        "the rewind not in effect",
        "a mute not in effect",
        "delivered answered lower",
        "markUnread answered above fromSeq",
    ],
)
def test_the_change_checks_report_each_broken_promise(plant: str) -> None:
    load, own, state = changes_record()
    if plant == "an edit lost":
        state.messages[(CID, 1)]["body"] = "u1 1"
    elif plant == "an edit applied twice":
        state.edits[(CID, 1)].append("u1 1 e1")
        state.log[(CID, 4)] = (1, "EDITED", 1)
        state.last_change_seqs[CID] = 4
    elif plant == "a change seq gap":
        state.last_change_seqs[CID] = 5
    elif plant == "a change seq holding another change":
        state.log[(CID, 2)] = (1, "REACTION", 1)
    elif plant == "a reaction applied twice":
        state.log[(CID, 4)] = (2, "REACTION", 1)
        state.last_change_seqs[CID] = 4
    elif plant == "a reaction count off":
        state.counts[(CID, 2, "👍")] = 2
    elif plant == "a reaction lost":
        state.reactions.clear()
        state.counts.clear()
    elif plant == "a delete lost":
        state.messages[(CID, 3)] = {"body": "u1 3", "edited": False, "deleted": False, "deleted_by": None}
    elif plant == "a change never acknowledged":
        load.stats.unacked_changes.append("edit (1, 2)")
    elif plant == "the rewind not in effect":
        state.own[(CID, WATCHER)]["lastReadSeq"] = 3
    elif plant == "a mute not in effect":
        state.own[(CID, WATCHER)]["muted"] = False
    elif plant == "delivered answered lower":
        own.acks.append(OwnAck("markDelivered", CID, {"c": CID, "s": 1}, {"deliveredSeq": 2}))
    else:
        own.acks[0].answer["lastReadSeq"] = 1
    assert checked(load, own, state).failures, plant
