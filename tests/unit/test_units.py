"""One rule for sizes and durations, and numbers that are finite, bounded and nothing else."""

from __future__ import annotations

import click
import click.testing
import pytest

from rgwkeeper.errors import UsageError
from rgwkeeper.units import (MAX_BYTES, Duration, FiniteFloat, FiniteInt, Size, Text, check_number, parse_duration,
                             parse_number, parse_size)


@pytest.mark.parametrize("text, size", [
    ("0", 0), ("4096", 4096), ("1B", 1), ("64KB", 64_000), ("64kb", 64_000), ("64KiB", 65_536), ("64kib", 65_536),
    ("4MB", 4_000_000), ("4MiB", 4 << 20), ("1GB", 10**9), ("1GiB", 1 << 30), ("2TB", 2 * 10**12),
    ("2TiB", 2 << 40), ("1.5KiB", 1536), ("0.5KB", 500), ("1.5 MiB", 1572864),
])
def test_sizes_follow_one_rule(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text, message", [
    ("64K", "size '64K' is ambiguous: write 64KiB (65,536 bytes) or 64KB (64,000 bytes)"),
    ("1M", "size '1M' is ambiguous: write 1MiB (1,048,576 bytes) or 1MB (1,000,000 bytes)"),
    ("4g", "size '4g' is ambiguous: write 4GiB (4,294,967,296 bytes) or 4GB (4,000,000,000 bytes)"),
    ("1Ti", "size '1Ti' is ambiguous: write 1TiB (1,099,511,627,776 bytes) or 1TB (1,000,000,000,000 bytes)"),
])
def test_a_bare_k_m_g_t_is_refused_with_both_spellings(text, message):
    with pytest.raises(UsageError) as exc:
        parse_size(text)
    assert str(exc.value) == message


@pytest.mark.parametrize("text", [
    "", " ", "nan", "NaN", "inf", "infK", "infKiB", "1e400K", "1e3", "-1", "+5", " 5", "5 ", "5\n", "5XB",
    "1_000", "0x10", "\u0663", "1.5B", "1.0000001KiB", "9999999999TiB", str(MAX_BYTES + 1),
    "9" * 5000, "9" * 5000 + "K",  # over Python's 4300-digit limit: a ValueError, not a refusal
])
def test_sizes_refuse_anything_else_in_one_line(text):
    with pytest.raises(UsageError) as exc:
        parse_size(text)
    assert "\n" not in str(exc.value)


def test_a_caller_bound_is_kept():
    assert parse_size("5GiB", max_bytes=5 << 30) == 5 << 30
    with pytest.raises(UsageError, match="the most accepted is 5,368,709,120 bytes"):
        parse_size("5.1GiB", max_bytes=5 << 30)


@pytest.mark.parametrize("text, seconds", [
    ("30s", 30), ("15m", 900), ("12h", 43200), ("7d", 604800), ("2w", 1209600), ("90", 90), ("1.5h", 5400),
    ("36500d", 36500 * 86400),
])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", [
    "nan", "NaNd", "inf", "infd", "1e400", "1e3s", "0", "0s", "-1d", "soon", "", " 7d", "7d ", "7 d\n",
    "36600d", "9999999w", "7y", "9" * 5000 + "d",
])
def test_durations_refuse_non_finite_zero_negative_and_absurd(text):
    with pytest.raises(UsageError) as exc:
        parse_duration(text)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), 11, -1, "5", None, True])
def test_check_number_refuses_what_comparisons_let_through(value):
    with pytest.raises(UsageError, match="^x must be"):
        check_number(value, "x", lo=0, hi=10)


def test_parse_number_is_strict_decimal_text():
    assert parse_number("1e3", "x") == 1000.0 and parse_number("-2", "x", integer=True) == -2
    for bad in ("nan", "inf", "1e400", " 1", "1 ", "1_0", "0x1", "1.5.1", "", "9" * 5000):
        with pytest.raises(UsageError):
            parse_number(bad, "x")
    with pytest.raises(UsageError, match=r"x '9999999999999999999999999999999999999999'\.\.\. \(5000 characters\) is too long"):
        parse_number("9" * 5000, "x", integer=True)
    with pytest.raises(UsageError):
        parse_number("1.5", "x", integer=True)


def _click(param_type, args):
    @click.command()
    @click.option("--v", type=param_type)
    def cmd(v):
        click.echo(repr(v))

    return click.testing.CliRunner().invoke(cmd, args)


@pytest.mark.parametrize("param_type, text", [
    (FiniteFloat(1, 600), "nan"), (FiniteFloat(1, 600), "NaN"), (FiniteFloat(1, 600), "inf"),
    (FiniteFloat(1, 600), "1e400"), (FiniteFloat(1, 600), "0.5"), (FiniteFloat(1, 600), "601"),
    (FiniteFloat(1, 600), ""), (FiniteFloat(1, 600), " 5"), (FiniteFloat(1, 600), "5s"),
    (FiniteFloat(), "1e400"), (FiniteFloat(), "-inf"),
    (FiniteInt(1, 10), "nan"), (FiniteInt(1, 10), "1.0"), (FiniteInt(1, 10), "1_0"), (FiniteInt(1, 10), "0"),
    (FiniteInt(), str(2**63)), (FiniteInt(), "9" * 400), (FiniteInt(1, 10), "-" + "9" * 400), (FiniteInt(), " 3"),
    (FiniteInt(), "\u0663"),
    (Size(), "64K"), (Size(), "infK"), (Duration(), "nan"), (Duration(), "NaNd"),
    (Text(), ""), (Text(), " x"), (Text(), "x\n"),
])
def test_click_types_refuse_with_a_usage_error(param_type, text):
    # click's FloatRange lets nan through: every comparison with nan is false.
    result = _click(param_type, ["--v", text])
    assert result.exit_code == 2 and "Invalid value for '--v'" in result.output, result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("param_type, text, value", [
    (FiniteFloat(1, 600), "2.5", "2.5"), (FiniteFloat(0, 10), "1e1", "10.0"), (FiniteInt(-5, 5), "-5", "-5"),
    (Size(), "4MiB", "4194304"), (Duration(), "2h", "7200.0"), (Text(), "client.x", "'client.x'"),
])
def test_click_types_accept(param_type, text, value):
    result = _click(param_type, ["--v", text])
    assert result.exit_code == 0 and result.output == value + "\n", result.output
