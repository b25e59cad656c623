"""A bounded pass over a pickle's opcodes before anything is built from it.

The snapshot reader (evidence.memory) loads with an unpickler that resolves no global, so no
code runs; but a plain pickle can still cost without bound: `LONG_BINPUT 0xFFFFFFFF` makes
CPython's unpickler grow its memo table to 2^33 pointers (64 GB) from 6 bytes, a LONG4 of a
million bytes is a 2^(8*10^6) integer, and a few hundred kB of memo references (BINGET) repeat
one list inside another until a walk over them never ends. This pass reads each opcode's
argument length from the pickle format (PEP 3154, Lib/pickletools.py) without building
anything, and refuses: an opcode outside the binary protocol-2+ containers and scalars, a
memo index past the opcodes read so far, an integer over 9 bytes (2^64), a length past the end
of the data, more than MAX_OPCODES opcodes. Its count is also the budget of the walk over
what is built (every object the unpickler makes costs at least one opcode), so shared
references cannot multiply the work.
"""

from __future__ import annotations

import pickletools
from dataclasses import dataclass

# A real snapshot of a long run is tens of MB (frames of every live block): ~1 opcode per 4
# bytes at most, so 64 M opcodes covers the 256 MiB file bound.
MAX_OPCODES = 64_000_000
MAX_INT_BYTES = 9            # LONG1 / LONG4 payload: up to 2^64 (sizes are at most 2^53)

# Opcodes that build containers and scalars in the binary protocols (no global, no call, no
# extension registry, no persistent id, no out-of-band buffer, no text-protocol argument).
ALLOWED = {"BININT", "BININT1", "BININT2", "LONG1", "LONG4", "BINSTRING", "SHORT_BINSTRING",
           "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8", "NONE", "NEWTRUE",
           "NEWFALSE", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "BINFLOAT",
           "EMPTY_LIST", "APPEND", "APPENDS", "LIST", "EMPTY_TUPLE", "TUPLE", "TUPLE1",
           "TUPLE2", "TUPLE3", "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS", "EMPTY_SET",
           "ADDITEMS", "FROZENSET", "POP", "DUP", "MARK", "POP_MARK", "BINGET", "LONG_BINGET",
           "BINPUT", "LONG_BINPUT", "MEMOIZE", "PROTO", "STOP", "FRAME"}
# Argument layout per opcode byte: (name, fixed size) or (name, -k) for a length prefix of k
# bytes (pickletools: TAKEN_FROM_ARGUMENT1 = -2, 4 = -3, 4U = -4, 8U = -5).
_PREFIX = {-2: 1, -3: 4, -4: 4, -5: 8}
_TABLE = {ord(op.code) if len(op.code) == 1 else op.code[0]:
          (op.name, op.arg.n if op.arg is not None else 0)
          for op in pickletools.opcodes if op.name in ALLOWED}


class PickleRefused(Exception):
    """The pickle breaks a bound; the message says which and at which byte."""


@dataclass(frozen=True)
class Scan:
    opcodes: int        # opcodes read: a bound on the objects the unpickler builds


def scan(raw: bytes) -> Scan:
    """Check every opcode of `raw` (see the module docstring); linear in its length."""
    i, n, ops = 0, len(raw), 0
    strings: list[tuple[int, int]] = []    # the last two string arguments: STACK_GLOBAL's
    while i < n:
        code = raw[i]
        spec = _TABLE.get(code)
        if spec is None:
            raise PickleRefused(_refusal(raw, i, strings))
        name, size = spec
        if name in ("SHORT_BINUNICODE", "BINUNICODE"):
            strings = [*strings[-1:], (i + 1 + (1 if name[0] == "S" else 4), i)]
        ops += 1
        if ops > MAX_OPCODES:
            raise PickleRefused(f"more than {MAX_OPCODES:,} opcodes")
        i += 1
        if size < 0:   # a length prefix, then that many bytes
            k = _PREFIX[size]
            length = int.from_bytes(raw[i:i + k], "little", signed=(size == -3))
            if (name in ("LONG1", "LONG4")) and not 0 <= length <= MAX_INT_BYTES:
                raise PickleRefused(f"an integer of {length} bytes at byte {i - 1} (at most "
                                    f"{MAX_INT_BYTES}: 2^64)")
            if length < 0 or i + k + length > n:
                raise PickleRefused(f"{name} at byte {i - 1} runs past the end of the data")
            i += k + length
        else:
            if i + size > n:
                raise PickleRefused(f"{name} at byte {i - 1} runs past the end of the data")
            if name in ("BINPUT", "LONG_BINPUT") and \
                    int.from_bytes(raw[i:i + size], "little") > ops:
                raise PickleRefused(f"memo index at byte {i - 1} past the {ops} opcodes read")
            if name == "FRAME" and i + 8 + int.from_bytes(raw[i:i + 8], "little") > n:
                raise PickleRefused(f"frame at byte {i - 1} runs past the end of the data")
            i += size
        if name == "STOP":
            if i != n:
                raise PickleRefused(f"{n - i} bytes after the end of the pickle (byte {i})")
            return Scan(ops)
    raise PickleRefused("truncated: no STOP opcode")


def _refusal(raw: bytes, i: int, strings: list[tuple[int, int]]) -> str:
    """Why the opcode at byte `i` is refused, naming the global it would load when it is one
    (GLOBAL's `module\nname\n` argument, or STACK_GLOBAL's two strings before it)."""
    op = next((o for o in pickletools.opcodes if o.code == chr(raw[i])), None)
    what = f"opcode {op.name if op else hex(raw[i])} at byte {i}"
    target = ""
    if op is not None and op.name == "GLOBAL":
        parts = raw[i + 1:i + 200].split(b"\n")[:2]
        target = ".".join(p.decode("utf-8", "replace") for p in parts)
    elif op is not None and op.name == "STACK_GLOBAL" and len(strings) == 2:
        target = ".".join(raw[start:end].decode("utf-8", "replace")
                          for start, end in ((a, _string_end(raw, a, b)) for a, b in strings))
    if target:
        return f"refusing to load {target[:120]} ({what}): only containers and numbers are loaded"
    return f"{what} is not a plain container or scalar"


def _string_end(raw: bytes, start: int, opcode_at: int) -> int:
    k = start - opcode_at - 1      # the length prefix: 1 byte (SHORT_BINUNICODE) or 4
    return start + int.from_bytes(raw[opcode_at + 1:start], "little") if k in (1, 4) else start


class Budget:
    """The walk over what a pickle built may visit at most `limit` elements: shared references
    (memo GETs) could otherwise repeat a list inside another without bound."""

    def __init__(self, limit: int):
        self.left = limit

    def spend(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise PickleRefused("its containers repeat shared references more often than the "
                                "pickle holds objects (a crafted snapshot)")
