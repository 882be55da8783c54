"""Length-prefixed frames over a socket, and a reader that never waits past a deadline.

A frame is a 4-byte big-endian length ``n`` followed by ``n`` bytes. Requests (trainer -> worker)
carry a pickle: the trainer is the trusted side. Replies (worker -> trainer) carry UTF-8 JSON and
nothing else, so a hostile worker can send the trainer wrong data but never code: the trainer
decodes them with :func:`json.loads` only, refuses frames over ``max_frame`` bytes, and reads with
``select`` under the call's deadline, so a worker that writes half a frame and stops costs the
trainer the time limit, not a hang.

Reply frames are JSON objects, one of::

    {"part": <JSON value>}      one streamed result (a generator target yields several)
    {"end": true}               the call finished
    {"ready": true}             a fresh worker rebuilt its target (once, before its first reply): that
                                call's time limit starts here
    {"error": "<traceback>"}    the target raised; the call finished
"""

from __future__ import annotations

import json
import math
import pickle
import select
import socket
import struct
import time

__all__ = ["MAX_FRAME_BYTES", "FrameError", "FrameReader", "send_frame", "recv_request", "encode_reply"]

HEADER = struct.Struct(">I")
MAX_FRAME_BYTES = 64 * 1024 * 1024
"""Largest reply frame the trainer accepts (64 MiB): a longer length prefix is a broken worker."""


class FrameError(Exception):
    """The worker sent something that is not a well-formed reply frame."""


def send_frame(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(HEADER.pack(len(payload)) + payload)


def encode_reply(obj) -> bytes:
    """A reply frame's payload: JSON (NaN and +-inf allowed: scores may be non-finite)."""
    return json.dumps(obj, allow_nan=True, separators=(",", ":")).encode("utf-8")


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv_request(sock: socket.socket):
    """In the worker: the next pickled request (blocking); raises ``EOFError`` at end-of-file."""
    head = _recv_exact(sock, HEADER.size)
    body = None if head is None else _recv_exact(sock, HEADER.unpack(head)[0])
    if body is None:
        raise EOFError("the trainer closed its end")
    return pickle.loads(body)


class FrameReader:
    """Reads reply frames from the worker's socket, each read bounded by a deadline.

    ``next(deadline)`` returns the decoded JSON object of the next frame, ``None`` at the deadline
    (whatever part of a frame has arrived is kept for the next read), and raises ``EOFError`` when
    the worker closed its end, ``FrameError`` on a frame that is too long or not JSON.
    """

    def __init__(self, sock: socket.socket, max_frame: int = MAX_FRAME_BYTES):
        self.sock, self.max_frame, self.buf = sock, max_frame, bytearray()
        self.poll = select.poll()  # not select(): a trainer may hold descriptors above FD_SETSIZE
        self.poll.register(sock.fileno(), select.POLLIN)

    def _frame(self):
        if len(self.buf) < HEADER.size:
            return None
        size = HEADER.unpack_from(self.buf)[0]
        if size > self.max_frame:
            raise FrameError(f"a reply frame of {size} bytes is over the limit of {self.max_frame}")
        if len(self.buf) < HEADER.size + size:
            return None
        body = bytes(self.buf[HEADER.size:HEADER.size + size])
        del self.buf[:HEADER.size + size]
        try:
            obj = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as err:
            raise FrameError(f"a reply frame is not JSON ({type(err).__name__}: {str(err)[:200]})") from None
        if not isinstance(obj, dict):
            raise FrameError(f"a reply frame is a JSON {type(obj).__name__}, expected an object")
        return obj

    def next(self, deadline: float | None):
        while True:
            frame = self._frame()
            if frame is not None:
                return frame
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                return None
            if self.sock.fileno() < 0:
                raise EOFError("the socket was closed")
            if not self.poll.poll(None if wait is None else max(0, int(wait * 1000) + 1)):
                continue  # the deadline check above returns None
            try:
                data = self.sock.recv(1 << 20, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if not data:
                raise EOFError("the worker closed its end")
            self.buf += data


def deadline_after(timeout_s: float | None, start: float) -> float | None:
    """``start + timeout_s`` on the monotonic clock (``None``: no deadline)."""
    if timeout_s is None or math.isinf(timeout_s):
        return None
    return start + timeout_s

