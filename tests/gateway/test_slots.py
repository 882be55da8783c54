"""The books of the gateway's connections (steadyrl.gateway.slots), without sockets: who is pushed
out (the oldest keyless one, never one that showed the key), when a newcomer is refused, and that
handler threads stay bounded while pushed-out ones have not ended yet."""

from __future__ import annotations

import pytest

from steadyrl.gateway.slots import Slots


def test_the_oldest_keyless_connection_is_pushed_out_never_an_authenticated_one():
    slots = Slots(limit=4, reserved=2)  # 2 keyless at most
    assert slots.admit("a") == (True, None) and slots.admit("b") == (True, None)
    assert slots.authenticate("a")
    assert slots.admit("c") == (True, None)  # waiting: b, c
    assert slots.admit("d") == (True, "b")  # the oldest keyless one, not a (authenticated, older)
    assert slots.admit("e") == (True, "c")
    assert slots.counts() == (2, 1)
    assert not slots.authenticate("b")  # pushed out: showing the key afterwards does not bring it back
    assert slots.authenticate("d") and slots.authenticate("e")
    assert slots.admit("f") == (True, None)  # 3 authenticated + 1 waiting = the limit
    assert slots.admit("g") == (True, "f")  # full: the keyless one makes room
    assert slots.authenticate("g")
    assert slots.admit("h") == (False, None)  # every slot a key holder's: refused
    assert slots.refused == 1 and slots.evicted == 3


def test_threads_of_pushed_out_connections_count_until_they_end():
    slots = Slots(limit=2, reserved=1)
    admitted = [slots.admit(i)[0] for i in range(6)]  # each pushes the last out; no thread has ended
    assert admitted == [True, True, True, True, False, False]  # 2 x limit threads at most
    assert slots.threads == 4
    for i in range(4):
        slots.release(i)
    assert slots.threads == 0 and slots.counts() == (0, 0)
    assert slots.admit("next") == (True, None)


@pytest.mark.parametrize("reserved", [-1, 4, 5])
def test_reserved_slots_must_leave_room_for_a_keyless_newcomer(reserved):
    with pytest.raises(ValueError, match=f"reserved_connections = {reserved}"):
        Slots(limit=4, reserved=reserved)
