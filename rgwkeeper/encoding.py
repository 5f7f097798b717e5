"""Ceph's binary encoding (``include/encoding.h``), as far as rgwkeeper reads and writes it.

Little-endian fixed-width integers; strings, lists and maps prefixed by a u32 count; and
versioned structs, ``ENCODE_START(v, compat, bl)``: a u8 version, a u8 compat version (the
oldest reader that can decode it) and a u32 length, so a reader skips the trailing fields of a
newer version it does not know. Every decoder in rgwkeeper (the object manifest, the GC queue's
entries) reads through :class:`Decoder`, which never reads past its input: anything short,
inconsistent or too new raises the caller's error class.
"""
from __future__ import annotations

import struct

__all__ = ["ANY_COMPAT", "DecodeError", "Decoder", "enc_bool", "enc_string", "enc_struct", "enc_u32"]

#: Decoder.begin's ``known_v`` that accepts any compat version: for a struct only skipped, or
#: whose fields read are laid out alike in every version (a newer one's are skipped).
ANY_COMPAT = 255


class DecodeError(ValueError):
    """Bytes that cannot be decoded as the structure expected."""


class Decoder:
    """A cursor over ``data``; errors are raised as ``error`` (a DecodeError subclass)."""

    def __init__(self, data: bytes, error: type[DecodeError] = DecodeError, *, strict_utf8: bool = True) -> None:
        self.data = data
        self.pos = 0
        self.end = len(data)
        self.error = error
        self.strict_utf8 = strict_utf8  # False: bytes that are not UTF-8 kept as surrogate escapes

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise self.error(f"truncated at byte {self.pos} (wanted {n} more, {self.end - self.pos} left)")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def u32(self) -> int:
        return int(struct.unpack("<I", self.take(4))[0])

    def u64(self) -> int:
        return int(struct.unpack("<Q", self.take(8))[0])

    def boolean(self) -> bool:
        v = self.u8()
        if v > 1:
            raise self.error(f"a bool of value {v} at byte {self.pos - 1}")
        return bool(v)

    def string(self) -> str:
        raw = self.take(self.u32())
        if not self.strict_utf8:
            return raw.decode("utf-8", errors="surrogateescape")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.error(f"a string that is not UTF-8 before byte {self.pos}") from None

    def count(self) -> int:
        """A list's or map's element count, refused if more elements than bytes are left."""
        n = self.u32()
        if n > self.end - self.pos:  # every element takes at least one byte
            raise self.error(f"a count of {n} with {self.end - self.pos} bytes left")
        return n

    def begin(self, what: str, known_v: int, min_v: int, legacy_compat_v: int = 0,
              legacy_len_v: int = 0) -> tuple[int, int]:
        """Start a versioned struct; return (its version, where it ends). ``legacy_*`` are the
        DECODE_START_LEGACY_COMPAT_LEN thresholds below which Ceph wrote no compat byte or
        length; versions that old are refused (``min_v``) rather than guessed at."""
        v = self.u8()
        if v < max(min_v, legacy_compat_v, legacy_len_v):
            raise self.error(f"{what} of version {v}: too old for this reader (from {min_v})")
        compat = self.u8()
        if compat > known_v:
            raise self.error(f"{what} of version {v} needs a reader of version {compat} (this one reads {known_v})")
        length = self.u32()
        end = self.pos + length
        if end > self.end:
            raise self.error(f"{what} of {length} bytes with {self.end - self.pos} left")
        return v, end

    def finish(self, what: str, end: int) -> None:
        """End a struct begun with :meth:`begin`, skipping the fields of a newer version."""
        if self.pos > end:
            raise self.error(f"{what} read past its own end")
        self.pos = end

    def done(self, what: str) -> None:
        """Nothing may follow the outermost struct."""
        if self.pos != self.end:
            raise self.error(f"{self.end - self.pos} bytes after the {what}")


def enc_u32(n: int) -> bytes:
    return struct.pack("<I", n)


def enc_bool(b: bool) -> bytes:
    return b"\x01" if b else b"\x00"


def enc_string(s: str | bytes) -> bytes:
    raw = s.encode("utf-8") if isinstance(s, str) else s
    return enc_u32(len(raw)) + raw


def enc_struct(version: int, compat: int, body: bytes) -> bytes:
    """ENCODE_START(version, compat) ... ENCODE_FINISH around ``body``."""
    return bytes((version, compat)) + enc_u32(len(body)) + body
