"""A minimal pgoutput *structure* reader used by the recorder and the error tests.

This is not a decoder: it does not turn anything into events. It only walks the bytes far
enough to label each message (``"U:K+u"`` = an Update carrying a K old-key tuple and an
unchanged-TOAST marker in one of its tuples) and to locate the fields the malformed-input
tests corrupt (TupleData column-count and value-length fields).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

#: Tags that carry a leading Int32 xid while inside a Stream Start .. Stream Stop block.
STREAMED_XID_TAGS = frozenset(b"RYIUDTM")


class WireError(ValueError):
    """The bytes do not have the pgoutput structure this reader expects."""


@dataclass
class TupleLayout:
    """Where a TupleData sits inside a message."""

    marker: str  # "N", "K" or "O"
    ncols_offset: int
    kinds: list[str] = field(default_factory=list)  # one of "n", "u", "t", "b" per column
    length_offsets: list[int] = field(default_factory=list)  # offsets of Int32 lengths


@dataclass
class MessageLayout:
    tag: str
    label: str
    tuples: list[TupleLayout] = field(default_factory=list)
    relation_id: int | None = None
    relation_name_offset: int | None = None  # offset of the relname String in 'R'
    relation_ncols_offset: int | None = None


class _Reader:
    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise WireError(f"short message at offset {self.pos}")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def u8(self) -> int:
        return self.take(1)[0]

    def i16(self) -> int:
        return int(struct.unpack(">h", self.take(2))[0])

    def i32(self) -> int:
        return int(struct.unpack(">i", self.take(4))[0])

    def u32(self) -> int:
        return int(struct.unpack(">I", self.take(4))[0])

    def i64(self) -> int:
        return int(struct.unpack(">q", self.take(8))[0])

    def cstring(self) -> bytes:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise WireError(f"unterminated string at offset {self.pos}")
        value = self.data[self.pos : end]
        self.pos = end + 1
        return value

    def tuple_data(self, marker: str) -> TupleLayout:
        layout = TupleLayout(marker=marker, ncols_offset=self.pos)
        ncols = self.i16()
        for _ in range(ncols):
            kind = chr(self.u8())
            layout.kinds.append(kind)
            if kind in "tb":
                layout.length_offsets.append(self.pos)
                length = self.i32()
                if length < 0:
                    raise WireError("negative length")
                self.take(length)
            elif kind not in "nu":
                raise WireError(f"unknown column kind {kind!r}")
        return layout


def parse_layout(data: bytes, in_stream: bool = False, v4_abort: bool = False) -> MessageLayout:
    """Label one message. `in_stream`: inside a Stream Start/Stop block (xid present)."""
    if not data:
        raise WireError("empty message")
    r = _Reader(data, 1)
    tag = chr(data[0])
    out = MessageLayout(tag=tag, label=tag)
    if in_stream and data[0] in STREAMED_XID_TAGS:
        r.i32()
    if tag == "R":
        out.relation_id = r.u32()
        r.cstring()
        out.relation_name_offset = r.pos
        r.cstring()
        r.u8()
        out.relation_ncols_offset = r.pos
        for _ in range(r.i16()):
            r.u8()
            r.cstring()
            r.u32()
            r.i32()
    elif tag == "I":
        out.relation_id = r.u32()
        if chr(r.u8()) != "N":
            raise WireError("insert without N")
        out.tuples.append(r.tuple_data("N"))
    elif tag == "U":
        out.relation_id = r.u32()
        marker = chr(r.u8())
        if marker in "KO":
            out.tuples.append(r.tuple_data(marker))
            marker = chr(r.u8())
        if marker != "N":
            raise WireError("update without N")
        out.tuples.append(r.tuple_data("N"))
    elif tag == "D":
        out.relation_id = r.u32()
        marker = chr(r.u8())
        if marker not in "KO":
            raise WireError("delete without K/O")
        out.tuples.append(r.tuple_data(marker))
    elif tag == "T":
        nrels = r.i32()
        options = r.u8()
        for _ in range(nrels):
            r.u32()
        out.label = f"T:{nrels}rels,opt{options}"
    elif tag == "M":
        flags = r.u8()
        r.i64()
        r.cstring()
        r.take(r.i32())
        out.label = "M:tx" if flags & 1 else "M:nontx"
    elif tag == "A":
        xid, subxid = r.u32(), r.u32()
        if v4_abort:
            r.i64()
            r.i64()
        out.label = "A:top" if xid == subxid else "A:sub"
    else:
        skip = {"B": 20, "C": 25, "O": 8, "Y": 4, "S": 5, "E": 0, "c": 29}
        if tag in skip:
            r.take(skip[tag])
            if tag in "OY":
                r.cstring()
                if tag == "Y":
                    r.cstring()
        elif tag == "b":
            r.take(28)
            r.cstring()
        elif tag in "PKp":
            r.take(29)
            r.cstring()
        elif tag == "r":
            r.take(37)
            r.cstring()
        else:
            raise WireError(f"unknown tag {tag!r}")
    if r.pos != len(data):
        raise WireError(f"{len(data) - r.pos} trailing bytes after {tag!r}")
    if out.tuples:
        old = [t.marker for t in out.tuples if t.marker != "N"]
        out.label = tag + (":" + old[0] if old else "")
        if any("u" in t.kinds for t in out.tuples):
            out.label += "+u"
    return out


def layouts(messages: Iterable[bytes], v4_abort: bool = False) -> list[MessageLayout]:
    """Layouts of a message sequence, tracking Stream Start/Stop blocks."""
    result = []
    in_stream = False
    for data in messages:
        layout = parse_layout(data, in_stream=in_stream, v4_abort=v4_abort)
        if layout.tag == "S":
            in_stream = True
        elif layout.tag == "E":
            in_stream = False
        result.append(layout)
    return result


def labels(messages: Iterable[bytes], v4_abort: bool = False) -> list[str]:
    return [layout.label for layout in layouts(messages, v4_abort=v4_abort)]


def compress_labels(items: list[str]) -> str:
    """``["B", "I", "I", "I", "C"]`` -> ``"B I*3 C"`` for compact reports."""
    parts: list[str] = []
    prev, count = None, 0
    for item in [*items, None]:
        if item == prev:
            count += 1
            continue
        if prev is not None:
            parts.append(prev if count == 1 else f"{prev}*{count}")
        prev, count = item, 1
    return " ".join(parts)


def control_fields(data: bytes) -> dict[str, int | str | bytes | bool]:
    """Fixed fields of the transaction-control, origin and (non-streamed) message tags.

    Used by the tests as the independent source of LSNs, xids and timestamps.
    """
    tag = chr(data[0])
    r = _Reader(data, 1)

    def u64() -> int:
        return int(struct.unpack(">Q", r.take(8))[0])

    if tag == "B":
        return {"final_lsn": u64(), "timestamp": r.i64(), "xid": r.u32()}
    if tag == "C":
        return {"flags": r.u8(), "commit_lsn": u64(), "end_lsn": u64(), "timestamp": r.i64()}
    if tag == "c":
        return {
            "xid": r.u32(),
            "flags": r.u8(),
            "commit_lsn": u64(),
            "end_lsn": u64(),
            "timestamp": r.i64(),
        }
    if tag == "S":
        return {"xid": r.u32(), "first_segment": bool(r.u8())}
    if tag == "A":
        out: dict[str, int | str | bytes | bool] = {"xid": r.u32(), "subxid": r.u32()}
        if len(data) == 25:
            out["abort_lsn"] = u64()
            out["abort_timestamp"] = r.i64()
        return out
    if tag == "b":
        return {
            "prepare_lsn": u64(),
            "end_lsn": u64(),
            "timestamp": r.i64(),
            "xid": r.u32(),
            "gid": r.cstring().decode(),
        }
    if tag in "Pp":
        return {
            "flags": r.u8(),
            "prepare_lsn": u64(),
            "end_lsn": u64(),
            "timestamp": r.i64(),
            "xid": r.u32(),
            "gid": r.cstring().decode(),
        }
    if tag == "K":
        return {
            "flags": r.u8(),
            "commit_lsn": u64(),
            "end_lsn": u64(),
            "timestamp": r.i64(),
            "xid": r.u32(),
            "gid": r.cstring().decode(),
        }
    if tag == "r":
        return {
            "flags": r.u8(),
            "prepare_end_lsn": u64(),
            "rollback_end_lsn": u64(),
            "prepare_timestamp": r.i64(),
            "rollback_timestamp": r.i64(),
            "xid": r.u32(),
            "gid": r.cstring().decode(),
        }
    if tag == "O":
        return {"origin_lsn": u64(), "origin_name": r.cstring().decode()}
    if tag == "M":
        flags = r.u8()
        lsn = u64()
        prefix = r.cstring().decode()
        content = r.take(r.i32())
        return {"flags": flags, "message_lsn": lsn, "prefix": prefix, "content": content}
    raise WireError(f"no control fields for tag {tag!r}")


#: pgoutput tag -> Event.kind
TAG_KIND = {
    "B": "begin",
    "C": "commit",
    "O": "origin",
    "R": "relation",
    "Y": "type",
    "I": "insert",
    "U": "update",
    "D": "delete",
    "T": "truncate",
    "M": "message",
    "S": "stream_start",
    "E": "stream_stop",
    "c": "stream_commit",
    "A": "stream_abort",
    "b": "begin_prepare",
    "P": "prepare",
    "K": "commit_prepared",
    "r": "rollback_prepared",
    "p": "stream_prepare",
}
