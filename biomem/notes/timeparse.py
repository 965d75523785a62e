"""Note timestamps: ISO 8601 and LoCoMo's "1:56 pm on 8 May, 2023" both become ISO strings."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from ..errors import InvalidInputError

_LOCOMO = re.compile(
    r"^\s*(?P<hour>\d{1,2}):(?P<minute>\d{2})\s*(?P<ampm>am|pm)\s+on\s+"
    r"(?P<day>\d{1,2})\s+(?P<month>[A-Za-z]+),?\s+(?P<year>\d{4})\s*$",
    re.IGNORECASE,
)


def parse_timestamp(value: str | datetime | None) -> str:
    """Return `value` as an ISO 8601 string (seconds precision); None means now (UTC)."""
    if value is None:
        return datetime.now(timezone.utc).replace(microsecond=0).isoformat()
    if isinstance(value, datetime):
        return value.replace(microsecond=0).isoformat()
    if not isinstance(value, str) or not value.strip():
        raise InvalidInputError(f"timestamp must be an ISO string or a datetime, got {value!r}")
    match = _LOCOMO.match(value)
    if match:
        hour = int(match["hour"]) % 12 + (12 if match["ampm"].lower() == "pm" else 0)
        month = match["month"][:3].title()
        try:
            date = datetime.strptime(f"{match['day']} {month} {match['year']}", "%d %b %Y")
        except ValueError as exc:
            raise InvalidInputError(f"unreadable date in timestamp {value!r}") from exc
        return date.replace(hour=hour, minute=int(match["minute"])).isoformat()
    try:
        return datetime.fromisoformat(value.strip()).replace(microsecond=0).isoformat()
    except ValueError as exc:
        raise InvalidInputError(
            f"unreadable timestamp {value!r}: use ISO 8601 or '1:56 pm on 8 May, 2023'"
        ) from exc
