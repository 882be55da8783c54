"""Who holds the gateway's connections: the ones that showed the run's key, and the ones that have not.

Any local user can open connections to the gateway; only the run's agent has the key. A connection
is *waiting* from the moment it is accepted until a request of it shows the key, then
*authenticated* for the rest of its life. With ``limit`` connections at most and ``reserved`` of them
kept for authenticated ones:

* at most ``limit - reserved`` connections wait at once: one more pushes the oldest waiting one
  out (it is shut down, its thread ends). So a pile of sockets that never show the key cannot keep
  a newcomer out: the newcomer that shows the key within its first moments becomes authenticated,
  and whoever holds the pile only pushes out their own oldest sockets;
* a connection that would take the count of all (waiting + authenticated) past ``limit`` also
  pushes the oldest waiting one out; when every connection is authenticated it is refused (503);
* handler threads, pushed-out ones included until they end, never pass ``2 * limit``: a newcomer
  past that is refused (503).

How long a waiting connection may live (its total lifetime, not a per-read timeout) is the
server's (:mod:`.server`, ``ServerLimits.unauthenticated_lifetime_s``); it reads :meth:`admitted_at`.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import OrderedDict


class Slots:
    """The books of one server's connections (module docstring); thread-safe."""

    def __init__(self, limit: int, reserved: int):
        if not 0 <= reserved < limit:
            raise ValueError(f"reserved_connections = {reserved!r}: must be >= 0 and below max_connections "
                             f"= {limit!r} (waiting connections need at least one slot)")
        self.limit, self.waiting_cap = limit, limit - reserved
        self._lock = threading.Lock()
        self._waiting: OrderedDict[socket.socket, float] = OrderedDict()  # not shown the key: admitted at
        self._authenticated: set[socket.socket] = set()
        self.threads = 0  # handler threads alive, pushed-out connections' included until they end
        self.refused = 0  # connections answered 503 at once
        self.evicted = 0  # waiting connections pushed out by newcomers

    def admit(self, conn: socket.socket) -> tuple[bool, socket.socket | None]:
        """``(admitted, pushed_out)``: whether ``conn`` gets a thread, and the waiting connection it
        pushed out (to shut down; None if none)."""
        with self._lock:
            held = len(self._waiting) + len(self._authenticated)
            if self.threads >= 2 * self.limit:
                self.refused += 1
                return False, None
            victim = None
            if self._waiting and (len(self._waiting) >= self.waiting_cap or held >= self.limit):
                victim, _ = self._waiting.popitem(last=False)
                self.evicted += 1
                held -= 1
            if held >= self.limit:  # every slot is an authenticated connection's
                self.refused += 1
                return False, victim
            self._waiting[conn] = time.monotonic()
            self.threads += 1
            return True, victim

    def admitted_at(self, conn: socket.socket) -> float | None:
        """When a waiting ``conn`` was accepted (``time.monotonic()``); None once it is not waiting."""
        with self._lock:
            return self._waiting.get(conn)

    def authenticate(self, conn: socket.socket) -> bool:
        """``conn`` showed the key: authenticated from now on. False if it was pushed out already."""
        with self._lock:
            if conn in self._waiting:
                del self._waiting[conn]
                self._authenticated.add(conn)
            return conn in self._authenticated

    def release(self, conn: socket.socket) -> None:
        """``conn``'s thread ended."""
        with self._lock:
            self._waiting.pop(conn, None)
            self._authenticated.discard(conn)
            self.threads -= 1

    def counts(self) -> tuple[int, int]:
        """``(waiting, authenticated)`` connections now."""
        with self._lock:
            return len(self._waiting), len(self._authenticated)


def push_out(conn: socket.socket) -> None:
    """Shut ``conn`` down without blocking: its thread's read returns at once and the thread ends
    (it closes the socket; closing it here could close a descriptor the system already reused)."""
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:  # already closed by its thread
        pass
