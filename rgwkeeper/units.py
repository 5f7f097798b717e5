"""Sizes, durations and plain numbers as an operator types them: one parser each, one rule.

Sizes (docs/commands.md, "Sizes and durations"): a plain integer is bytes; ``B`` is bytes;
``KB MB GB TB`` are powers of 1000 and ``KiB MiB GiB TiB`` powers of 1024; case does not
matter. A bare ``K``/``M``/``G``/``T`` (or ``Ki``...) is refused: the project once read
``1M`` as 1,048,576 in one command and ``1MB`` as 1,000,000 in another, and a filter must
not change meaning silently. Durations: plain seconds, or a number with ``s m h d w``.

Every number is parsed from its decimal text exactly (no float on the way), so ``nan``,
``inf``, ``1e400``, signs, padding and trailing garbage never get through, and a result
that would not fit a signed 64-bit integer is refused. Errors are :class:`UsageError`: one
line, exit 2.
"""

from __future__ import annotations

import math
import re
import sys
from decimal import Decimal
from typing import Any

import click

from rgwkeeper.errors import UsageError

#: The largest byte count anything accepts (a signed 64-bit integer, as RGW's sizes are).
MAX_BYTES = 2**63 - 1
#: The longest duration anything accepts; more is a typo.
MAX_DURATION_S = 100 * 365 * 86400
#: Plain integers (click options) are bounded the same way unless a caller gives a bound.
MAX_INT = 2**63 - 1
#: The longest text taken for a number, size or duration.
MAX_NUMBER_CHARS = 40

_SIZE_UNITS = {"": 1, "b": 1,
               "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
               "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}
_AMBIGUOUS = {"k": "k", "m": "m", "g": "g", "t": "t", "ki": "k", "mi": "m", "gi": "g", "ti": "t"}
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}

# ASCII digits only (str.isdigit and int() also take other scripts' digits); one optional
# space between the number and its unit, none around.
_NUMBER_UNIT_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)(?: ?([a-zA-Z]+))?", re.ASCII)
_INT_RE = re.compile(r"[+-]?[0-9]+", re.ASCII)
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)


def parse_size(text: str, *, what: str = "size", max_bytes: int = MAX_BYTES) -> int:
    """``4096`` -> 4096, ``64KiB`` -> 65536, ``64KB`` -> 64000, ``1.5MiB`` -> 1572864."""
    m = _NUMBER_UNIT_RE.fullmatch(text) if _short(text, what) else None
    unit = (m.group(2) or "").lower() if m else ""
    if m and unit in _AMBIGUOUS:
        number = m.group(1)
        binary = _SIZE_UNITS[_AMBIGUOUS[unit] + "ib"]
        decimal = _SIZE_UNITS[_AMBIGUOUS[unit] + "b"]
        base = _AMBIGUOUS[unit].upper()
        raise UsageError(f"{what} {_q(text)} is ambiguous: write {number}{base}iB "
                         f"({_bytes(Decimal(number) * binary)}) or {number}{base}B "
                         f"({_bytes(Decimal(number) * decimal)})")
    if not m or unit not in _SIZE_UNITS:
        raise UsageError(f"{what} {_q(text)} is not a size: write bytes (4096) or a number with B, KB, MB, "
                         "GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024)")
    value = Decimal(m.group(1)) * _SIZE_UNITS[unit]
    if value > max_bytes:
        raise UsageError(f"{what} {_q(text)} is {_bytes(value)}; the most accepted is {max_bytes:,} bytes")
    if value != value.to_integral_value():
        raise UsageError(f"{what} {_q(text)} is not a whole number of bytes ({value:f})")
    return int(value)


def _q(text: Any) -> str:
    """``text`` as a message shows it: quoted, and cut short."""
    return repr(text) if not isinstance(text, str) or len(text) <= MAX_NUMBER_CHARS else \
        f"{text[:MAX_NUMBER_CHARS]!r}... ({len(text)} characters)"


def _short(text: Any, what: str) -> bool:
    """False for what is not a string; a UsageError for a string longer than any number taken
    (Python refuses to convert an int of over 4300 digits: a ValueError, not a refusal)."""
    if isinstance(text, str) and len(text) > MAX_NUMBER_CHARS:
        raise UsageError(f"{what} {_q(text)} is too long: nothing taken here has over {MAX_NUMBER_CHARS} "
                         "characters")
    return isinstance(text, str)


def _bytes(value: Decimal) -> str:
    return f"{int(value):,} bytes" if value == value.to_integral_value() else f"{value:f} bytes"


def parse_duration(text: str, *, what: str = "duration", max_s: float = MAX_DURATION_S) -> float:
    """``30s``, ``15m``, ``12h``, ``7d``, ``2w`` or plain seconds (``90``) -> seconds, above 0."""
    m = _NUMBER_UNIT_RE.fullmatch(text) if _short(text, what) else None
    unit = (m.group(2) or "").lower() if m else ""
    if not m or unit not in _DURATION_UNITS:
        raise UsageError(f"{what} {_q(text)} is not like 30s, 15m, 12h, 7d or 2w (or plain seconds)")
    value = Decimal(m.group(1)) * _DURATION_UNITS[unit]
    if value <= 0:
        raise UsageError(f"{what} {_q(text)} must be above 0")
    if value > max_s:
        raise UsageError(f"{what} {_q(text)} is more than {max_s / (365 * 86400):g} years; check the number")
    return float(value)


def empty_size_range(larger_than: int | None, smaller_than: int | None) -> str | None:
    """A size filter that no object can match (no whole size strictly between the two bounds),
    said in one line, or None. Such a filter would delete nothing and say nothing."""
    if larger_than is None or smaller_than is None or smaller_than - larger_than >= 2:
        return None
    return (f"larger than {larger_than} B and smaller than {smaller_than} B leave no object size between them: "
            "nothing would match; give a smaller-than bound at least 2 above the larger-than bound")


def check_number(value: Any, what: str, *, lo: float | None = None, hi: float | None = None,
                 integer: bool = False, unit: str = "") -> Any:
    """``value`` if it is a finite number (an int if ``integer``) within [lo, hi], else UsageError.

    For the request objects of the Python API, which take numbers, not text: NaN passes every
    comparison, so each bound is checked as "not within" rather than "beyond"."""
    kind = "a whole number" if integer else "a number"
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type:
        raise UsageError(f"{what} must be {kind}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"{what} must be a finite number, got {value}")
    if lo is not None and not value >= lo:
        raise UsageError(f"{what} must be at least {_shown(lo)}{unit}, got {_shown(value)}")
    if hi is not None and not value <= hi:
        raise UsageError(f"{what} must be at most {_shown(hi)}{unit}, got {_shown(value)}")
    return value


def _shown(value: float) -> str:
    # An int is shown whole: 10**400 does not fit a float, and 2**63-1 should read as itself.
    if isinstance(value, int):
        text = f"{value:,}"
        return text if len(text) <= 40 else f"{text[:20]}... ({len(str(value))} digits)"
    return f"{value:g}"


def parse_number(text: str, what: str, *, lo: float | None = None, hi: float | None = None,
                 integer: bool = False) -> Any:
    """A number typed as text: ASCII decimal only (``nan``, ``inf``, ``0x10``, ``1_000`` and
    padding are refused), finite, within [lo, hi]; an int if ``integer``."""
    pattern = _INT_RE if integer else _FLOAT_RE
    if not _short(text, what) or not pattern.fullmatch(text):
        raise UsageError(f"{what} {_q(text)} is not {'a whole number' if integer else 'a number'}")
    return check_number(int(text) if integer else float(text), what, lo=lo, hi=hi, integer=integer)


def check_text(value: Any, what: str) -> str:
    """A name or word: a non-empty string without surrounding whitespace or control characters."""
    if not isinstance(value, str) or not value:
        raise UsageError(f"{what} is empty")
    if value != value.strip() or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise UsageError(f"{what} {value!r} has surrounding whitespace or control characters")
    return value


# -- click parameter types ----------------------------------------------------------------------

class _Bounded(click.ParamType):
    """Shared by FiniteInt and FiniteFloat: strict text, finite, within [lo, hi]."""

    integer = False

    def __init__(self, lo: float | None = None, hi: float | None = None) -> None:
        self.lo = lo
        self.hi = hi if hi is not None else MAX_INT if self.integer else sys.float_info.max

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            if isinstance(value, str):
                value = parse_number(value, "", lo=self.lo, hi=self.hi, integer=self.integer)
            else:
                check_number(value, "", lo=self.lo, hi=self.hi, integer=self.integer)
        except UsageError as exc:
            self.fail(str(exc).strip(), param, ctx)
        return value if self.integer else float(value)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.lo}, {self.hi})"


class FiniteInt(_Bounded):
    """A whole number in ASCII digits (an optional sign), within [lo, hi] (hi: 2**63-1 if not given)."""

    name = "integer"
    integer = True


class FiniteFloat(_Bounded):
    """A finite decimal number (no nan, inf or overflow to inf), within [lo, hi]."""

    name = "float"


class Size(click.ParamType):
    """A size by the project's rule (:func:`parse_size`), in bytes."""

    name = "size"

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            return parse_size(value, max_bytes=self.max_bytes)
        except UsageError as exc:
            self.fail(str(exc), param, ctx)


class Duration(click.ParamType):
    """A duration by the project's rule (:func:`parse_duration`), in seconds."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float):
            return value
        try:
            return parse_duration(value)
        except UsageError as exc:
            self.fail(str(exc), param, ctx)


class FilePath(click.Path):
    """click.Path that refuses an empty value: an unset shell variable would otherwise mean the
    current directory."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value == "":
            self.fail("is empty; give a file name", param, ctx)
        return super().convert(value, param, ctx)


class Text(click.ParamType):
    """A name or word: refuses an empty value (unless ``empty_ok``), surrounding whitespace and
    control characters (a newline would split the one-line outputs it is shown in), and, with
    ``max_len``, more characters than that."""

    name = "text"

    def __init__(self, empty_ok: bool = False, max_len: int | None = None) -> None:
        self.empty_ok = empty_ok
        self.max_len = max_len

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value == "" and self.empty_ok:
            return value
        try:
            text = check_text(value, "")
        except UsageError as exc:
            self.fail(str(exc).strip(), param, ctx)
        if self.max_len is not None and len(text) > self.max_len:
            self.fail(f"is {len(text):,} characters long; give at most {self.max_len}", param, ctx)
        return text


# The slowest purge rate cap accepted: below it one object waits minutes (a hang to the operator).
MIN_PURGE_RATE = 0.01
# The fastest: far above any purge (the RADOS floor is thousands a second), so more is a typo.
MAX_PURGE_RATE = 1_000_000.0
#: The most librados operations a purge keeps in flight (purge.rados_ops_in_flight and
#: purge.cap_ops_in_flight): far above what one process's aio keeps busy.
MAX_OPS_IN_FLIGHT = 4096


def rate_cap_ok(value: float) -> bool:
    """A purge rate cap is 0 (none) or a finite number of objects a second from MIN_PURGE_RATE
    to MAX_PURGE_RATE."""
    return math.isfinite(value) and (value == 0 or MIN_PURGE_RATE <= value <= MAX_PURGE_RATE)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def write_load_vs(ops: float, limit: float, relation: str = "is above") -> str:
    """``write load N op/s is above LIMIT``, or, for a load the daemon cannot judge yet (its first
    pass: reconcile.quiet_load), ``write load not known yet (one pass is no measure of quiet)``."""
    if math.isinf(ops):
        return "write load not known yet (one pass is no measure of quiet)"
    return f"write load {ops:.0f} op/s {relation} {limit:.0f}"
