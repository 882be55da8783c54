"""A GGUF file's header walked before the ``gguf`` package reads it, every size bounded by the file's.

``gguf.GGUFReader`` believes the counts a header states: one metadata array claiming 2^40
elements (a 99-byte file) makes it loop and allocate without bound, a 5,000-deep nested array
ends in a ``RecursionError``. :func:`check_header` walks the same structure first, reading only
the header (through ``mmap``: a multi-gigabyte file is not read into memory), and refuses with a
:class:`~steadyrl.errors.ModelLoadError` (exit 2) naming the offset and the claim:

* every length, count and tensor size is checked against the bytes left in the file before it
  is used (an array of ``n`` items of ``k`` bytes needs ``n * k`` of them; a string array, a
  nested array and a tensor description at least their fixed headers each);
* arrays nest at most :data:`MAX_DEPTH` deep; metadata keys and text values must be UTF-8.

Versions other than 2 and 3 are left to ``GGUFReader``, which refuses them.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

from .errors import ModelLoadError

__all__ = ["MAX_DEPTH", "check_header"]

MAX_DEPTH = 4
"""Arrays of arrays nest at most this deep (llama.cpp's own files use one level)."""

_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # GGUF value type -> bytes
_STRING, _ARRAY = 8, 9
_TENSOR_INFO_MIN = 8 + 4 + 4 + 8  # name length, dimensions, type, offset


class _Bad(Exception):
    pass


class _Cursor:
    def __init__(self, buf, order: str):
        self.buf, self.pos, self.order = buf, 0, order

    def left(self) -> int:
        return len(self.buf) - self.pos

    def take(self, n: int, what: str) -> int:
        if n > self.left():
            raise _Bad(f"{what} at byte {self.pos} claims {n:,} bytes, but the file has {self.left():,} left")
        self.pos += n
        return self.pos - n

    def uint(self, size: int, what: str) -> int:
        start = self.take(size, what)
        return int.from_bytes(self.buf[start:start + size], self.order)

    def text(self, what: str) -> str:
        n = self.uint(8, f"the length of {what}")
        start = self.take(n, what)
        try:
            return bytes(self.buf[start:start + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise _Bad(f"{what} at byte {start} is not UTF-8 text") from None


def _items(cur: _Cursor, count: int, size: int, what: str) -> None:
    if count * size > cur.left():
        raise _Bad(f"{what} at byte {cur.pos} claims {count:,} items of at least {size} bytes, but the file has "
                   f"{cur.left():,} bytes left")


def _skip_strings(cur: _Cursor, count: int, key: str) -> None:
    """Past ``count`` strings of an array (a vocabulary: 150,000 of them), each length checked
    against the bytes left; the text is the tokenizer's to read."""
    buf, pos, end = cur.buf, cur.pos, len(cur.buf)
    length = struct.Struct("<Q" if cur.order == "little" else ">Q").unpack_from
    for _ in range(count):
        if end - pos < 8:
            cur.pos = pos
            raise _Bad(f"the array {key!r} at byte {pos} is cut short")
        (n,) = length(buf, pos)
        pos += 8
        if n > end - pos:
            raise _Bad(f"a string of the array {key!r} at byte {pos} claims {n:,} bytes, but the file has "
                       f"{end - pos:,} left")
        pos += n
    cur.pos = pos


def _value(cur: _Cursor, vtype: int, key: str, depth: int) -> None:
    if vtype in _FIXED:
        cur.take(_FIXED[vtype], f"the value of {key!r}")
    elif vtype == _STRING:
        cur.text(f"the value of {key!r}")
    elif vtype == _ARRAY:
        if depth >= MAX_DEPTH:
            raise _Bad(f"the value of {key!r} nests arrays more than {MAX_DEPTH} deep")
        etype = cur.uint(4, f"the item type of {key!r}")
        count = cur.uint(8, f"the length of {key!r}")
        if etype in _FIXED:
            _items(cur, count, _FIXED[etype], f"the array {key!r}")
            cur.take(count * _FIXED[etype], f"the array {key!r}")
        elif etype == _STRING:
            _items(cur, count, 8, f"the array {key!r}")
            _skip_strings(cur, count, key)
        elif etype == _ARRAY:
            _items(cur, count, 12, f"the array {key!r}")
            for _ in range(count):
                _value(cur, etype, key, depth + 1)
        else:
            raise _Bad(f"the array {key!r} has items of unknown type {etype}")
    else:
        raise _Bad(f"the value of {key!r} has unknown type {vtype}")


def _walk(cur: _Cursor, size: int) -> None:
    n_tensors = cur.uint(8, "the tensor count")
    n_kv = cur.uint(8, "the metadata count")
    _items(cur, n_kv, 8 + 4 + 1, "the metadata")
    for _ in range(n_kv):
        key = cur.text("a metadata key")
        _value(cur, cur.uint(4, f"the type of {key!r}"), key, 0)
    _items(cur, n_tensors, _TENSOR_INFO_MIN, "the tensor list")
    for _ in range(n_tensors):
        name = cur.text("a tensor name")
        dims = cur.uint(4, f"the dimensions of tensor {name!r}")
        _items(cur, dims, 8, f"the shape of tensor {name!r}")
        elements = 1
        for _ in range(dims):
            elements *= cur.uint(8, f"the shape of tensor {name!r}")
        if elements > 8 * size:  # every stored format spends at least one bit on an element
            raise _Bad(f"tensor {name!r} claims {elements:,} elements, more than a {size:,}-byte file can hold")
        cur.take(4 + 8, f"the type and offset of tensor {name!r}")


def check_header(path: str | Path) -> None:
    """Refuse (:class:`ModelLoadError`) a GGUF whose header claims more than the file holds, nests
    arrays too deep or holds text that is not UTF-8 (module docstring). The magic is checked before."""
    path = Path(path)
    with path.open("rb") as f:
        size = path.stat().st_size
        if size < 8:
            raise ModelLoadError(f"GGUF file {str(path)!r} is cut short ({size} bytes): no header")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            version = int.from_bytes(buf[4:8], "little")
            order = "little" if version & 0xFFFF else "big"  # a big-endian file reads as 0x0N000000
            if int.from_bytes(buf[4:8], order) not in (2, 3):
                return  # GGUFReader names the versions it reads
            cur = _Cursor(memoryview(buf), order)
            cur.pos = 8
            try:
                _walk(cur, size)
            except _Bad as exc:
                raise ModelLoadError(f"GGUF file {str(path)!r} is malformed: {exc}") from None
            finally:
                cur.buf.release()
