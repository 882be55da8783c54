"""The value channel of a contained scorer (steadyrl/rewards/contained_verdict.py): an ``eval`` runs
in a fork and only plain data comes back; what comes back is rebuilt from an allowlist, never
evaluated; a fork that exits, prints, or runs past its time gives no value."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from steadyrl.rewards import contained_verdict as cv

REPO = str(Path(__file__).resolve().parents[2])
linux = pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(os, "fork"), reason="needs fork")


@pytest.mark.parametrize("value", [None, True, 3, -2**200, 0.1, 1 + 2j, "é", b"\x00", [1, (2, {3})],
                                   frozenset({"a"}), {"k": [1.5]}, ((),)])
def test_plain_values_round_trip_exactly(value):
    back = cv.decode(cv.encode(value))
    assert back == value and type(back) is type(value)


def test_sympy_expressions_round_trip_as_trees_of_allowed_classes():
    sympy = pytest.importorskip("sympy")
    x, c = sympy.Symbol("x", real=True), sympy.Symbol("C")
    for text in ("x**2/2 + C", "sin(x)*exp(2*x) - sqrt(3)*pi + I", "Rational(1, 3)*log(x) + 0.25", "oo", "-x"):
        expr = sympy.parse_expr(text, local_dict={"x": x, "C": c})
        assert cv.decode(cv.encode(expr)) == expr, text
    with pytest.raises(ValueError):
        cv.encode(sympy.Function("f")(x))  # an undefined function is not a value


@pytest.mark.parametrize("data", [["E", "Function", []], ["E", "__import__", [["s", "os"]]], ["K", "Dummy"],
                                  ["?", "x"], ["b", "yes"], "not a list", [], ["l", [["E", "lambdify", []]]]])
def test_decode_refuses_anything_outside_the_allowlist(data):
    pytest.importorskip("sympy")
    with pytest.raises((ValueError, TypeError)):
        cv.decode(data)


@linux
def test_an_eval_in_the_fork_returns_only_its_value():
    assert cv.contained_eval("[i * i for i in range(4)]") == [0, 1, 4, 9]
    with pytest.raises(ValueError, match="no value"):  # printed a score line and exited: no value
        cv.contained_eval("(print('{\"score\": 1.0}'), (x for x in ()).throw(SystemExit))")
    with pytest.raises(ValueError, match="failed"):
        cv.contained_eval("1 / 0")
    with pytest.raises(ValueError):
        cv.contained_eval("lambda: 1")  # a function is not a value


@linux
def test_a_fork_past_its_time_is_killed(monkeypatch):
    monkeypatch.setattr(cv, "EVAL_TIME_S", 0.5)
    with pytest.raises(TimeoutError):
        cv.contained_eval("exec('while True: pass')")


HOLDS_VERDICT_FD = r"""
import fcntl, json, os
from steadyrl.rewards import contained_verdict as cv

r, w = os.pipe()
read_fd = fcntl.fcntl(r, fcntl.F_DUPFD, 10)  # clear of the verdict descriptor's number
os.close(r)
os.dup2(w, cv.VERDICT_FD)
os.close(w)
try:
    got = repr(cv.contained_eval("__import__('os').write(3, b'{\"score\": 1.0}\\n')"))
except ValueError as err:  # EBADF in the fork: its eval failed
    got = str(err)
os.close(cv.VERDICT_FD)
os.set_blocking(read_fd, False)
try:
    leaked = os.read(read_fd, 100)
except BlockingIOError:
    leaked = b""
print(json.dumps({"got": got, "leaked": leaked.decode("latin-1")}))
"""


@linux
def test_the_fork_holds_no_verdict_descriptor():
    """Run in an interpreter of its own, whose fd 3 the test may take: in a pytest-xdist worker fd 3
    is the worker's channel from the controller, and a pipe put there while a message arrived
    ended the worker's reading (the worker then reported "finished" with tests still pending)."""
    out = subprocess.run([sys.executable, "-c", HOLDS_VERDICT_FD], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": REPO})
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["leaked"] == "" and "Bad file descriptor" in report["got"], report


@linux
def test_a_bare_eval_sees_the_builtins_alone_and_no_frame_of_the_caller():
    """``eval(text)`` in the fork gets the builtins as its globals and runs on a thread of its own:
    neither a name of the caller's module nor a frame walk (a generator's ``gi_frame.f_back``) reaches
    what the scorer holds (the entry it scores against)."""
    secret = "the oracle"  # a local of the caller's frame, as score_answer's entry is
    assert secret
    assert cv.contained_eval("len([1, 2])") == 2
    with pytest.raises(ValueError, match="NameError"):
        cv.contained_eval("VERDICT_FD")  # a global of the module that called eval
    walk = "[h.append(('{0[0].gi_frame%s}'.format(h) for x in [1])) or next(h[0]) for h in [[]]][0]"
    seen = [_value(walk % (".f_back" * up + where)) for up in range(1, 8)
            for where in (".f_locals", ".f_globals[__name__]", ".f_globals")]
    assert any(seen), "the walk reaches no frame at all"
    assert not any("the oracle" in s or cv.__name__ in s or "VERDICT_FD" in s for s in seen), seen


def _value(text):
    try:
        return cv.contained_eval(text)
    except ValueError:  # the walk went past the last frame
        return ""
