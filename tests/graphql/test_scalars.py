"""The DateTime scalar's fast serialization is datetime.isoformat, value for value."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatgql.graphql.scalars import datetime_text

_ZONES = st.sampled_from(
    [
        None,
        dt.UTC,
        dt.timezone(dt.timedelta(hours=5, minutes=30)),
        dt.timezone(dt.timedelta(hours=-8)),
        dt.timezone(dt.timedelta(seconds=-3601, microseconds=7)),
    ]
)


@settings(max_examples=1000, deadline=None)
@given(st.datetimes(timezones=_ZONES, allow_imaginary=True), st.booleans())
def test_datetime_text_is_isoformat_for_every_datetime(value: dt.datetime, whole_seconds: bool) -> None:
    if whole_seconds:
        value = value.replace(microsecond=0)  # isoformat leaves the fraction out: so must it
    assert datetime_text(value) == value.isoformat()


class _Subclass(dt.datetime):
    def isoformat(self, *args: object, **kwargs: object) -> str:
        return "its own"


def test_datetime_text_refuses_what_isoformat_refuses_and_ignores_overrides_as_it_does() -> None:
    for value in (dt.date(2026, 1, 2), "2026-01-02T00:00:00", 0):
        with pytest.raises(TypeError):
            dt.datetime.isoformat(value)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            datetime_text(value)  # type: ignore[arg-type]
    odd = _Subclass(2026, 1, 2, tzinfo=dt.UTC)
    assert datetime_text(odd) == dt.datetime.isoformat(odd) == "2026-01-02T00:00:00+00:00"
