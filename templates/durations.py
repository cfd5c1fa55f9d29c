"""Duration strings: Go's `time.ParseDuration` syntax plus a `d` (24 h) unit.

Providers write lifespans and template arithmetic as `90s`, `10m`, `1h30m`,
`1d` or `2d12h`; Go tools emit `1h0m0s` or `1.5s`. Both parse here, and
`format_duration` writes a form that parses back to the same value.

A duration is at most `MAX_DURATION`, 100 years (36500d, 876000h), either
way: every time lessor computes (a lease's end, a lifespan's limit) is a
time plus such a duration, and with times bounded too (`timestamps.py`)
that sum always exists. A longer duration is an error naming the bound,
never an overflow deep inside an actor.
"""

from __future__ import annotations

import re
from datetime import timedelta
from fractions import Fraction

# Microseconds per unit; exact fractions so `1.1h` is not off by float error.
_MICROSECONDS: dict[str, Fraction] = {
    "d": Fraction(86_400_000_000),
    "h": Fraction(3_600_000_000),
    "m": Fraction(60_000_000),
    "s": Fraction(1_000_000),
    "ms": Fraction(1_000),
    "us": Fraction(1),
    "µs": Fraction(1),
    "ns": Fraction(1, 1_000),
}
# Longer units first, so `ms` is not read as `m` followed by a stray `s`.
_TERM = r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|d|h|m|s)"
_DURATION = re.compile(rf"([+-]?)((?:{_TERM})+|0)")
_TERMS = re.compile(_TERM)

#: The longest duration lessor accepts anywhere: 100 years.
MAX_DURATION = timedelta(days=36_500)
MAX_DURATION_TEXT = "100 years (36500d, 876000h)"

_MAX_LENGTH = 64  # `2d12h30m15.5s` is 13; a longer text is a mistake or an attack, not a duration

_HINT = "expected terms like 90s, 10m, 1h30m, 1d or 2d12h (units d, h, m, s, ms, us, ns)"


def parse_duration(text: str) -> timedelta:
    """Parse a duration string, rounding to whole microseconds.

    A leading `-` is accepted (as in Go) so that negative results of
    timestamp subtraction, once written out, parse back.
    """
    if not isinstance(text, str):
        raise TypeError(f"a duration must be a string, not {type(text).__name__}")
    match = _DURATION.fullmatch(text) if len(text) <= _MAX_LENGTH else None
    if match is None:
        shown = text if len(text) <= _MAX_LENGTH else text[:_MAX_LENGTH] + "..."
        raise ValueError(f"invalid duration {shown!r}: {_HINT}")
    sign, body = match.group(1, 2)
    total = sum(
        (Fraction(number) * _MICROSECONDS[unit] for number, unit in _TERMS.findall(body)),
        Fraction(0),
    )
    if total > MAX_DURATION // timedelta(microseconds=1):
        raise ValueError(f"duration {text!r} is out of range: at most {MAX_DURATION_TEXT}")
    value = timedelta(microseconds=round(total))
    return -value if sign == "-" else value


def format_duration(value: timedelta) -> str:
    """Write `value` as `[-]<d>d<h>h<m>m<s>s`, leaving out zero terms (`0s` for zero)."""
    micros = value // timedelta(microseconds=1)
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    days, micros = divmod(micros, 86_400_000_000)
    hours, micros = divmod(micros, 3_600_000_000)
    minutes, micros = divmod(micros, 60_000_000)
    seconds, micros = divmod(micros, 1_000_000)
    parts = [f"{n}{unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "m")) if n]
    if micros:
        parts.append(f"{seconds}.{micros:06d}".rstrip("0") + "s")
    elif seconds or not parts:
        parts.append(f"{seconds}s")
    return sign + "".join(parts)
