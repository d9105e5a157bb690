"""The fault suite's checks catch what they claim to catch (no servers needed).

A clean record passes; each broken promise, planted in an otherwise clean
record, is reported.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from .load import Load, ReadAck, ReadStorm, SendAck, StormRead, Subscriber, WatermarkMonitor
from .scenario import Result, check, check_storm

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
