"""The sample's side of a contained third-party scorer (:mod:`.contained`): the text every scorer
script starts with. Standard library only (sympy when a value holds a sympy expression); it runs as
the sample's program inside the ``code`` reward's harness and is never imported for its functions.

**The rule** (DESIGN.md: "a sample never writes its own score"): the harness gives the scorer one
descriptor more than the program's stdin / stdout / stderr, :data:`VERDICT_FD`, and reads the score
from it alone (:func:`verdict`); stdout is never read. Model-written text never runs in a process
that holds that descriptor: once :func:`contain_eval` is called, every ``eval`` of the process
(``builtins.eval``: the package's own ``eval(answer)``, and the one sympy's ``parse_expr`` and
``sympify`` end in) runs in a fork that closes :data:`VERDICT_FD` before anything else, and sends
back only the *value* it computed, as plain data::

    fork:    close(VERDICT_FD); value = eval(...) on a fresh thread; write(len + tagged JSON of value); _exit
    parent:  value = decode(what arrived)  ->  the package's scorer goes on  ->  verdict(score)

A value is tagged JSON of exact built-in types (``None``, ``bool``, ``int``, ``float``, ``complex``,
``str``, ``bytes``, ``list``, ``tuple``, ``set``, ``frozenset``, ``dict``) and sympy expressions as
trees of the classes in :data:`SYMPY_CLASSES` (built back with ``evaluate=False``); anything else
fails the ``eval`` in the parent (``ValueError``), as do a fork that ends without a value, one past
:data:`EVAL_TIME_S` (``TimeoutError``, the fork's process group killed) and a value over
:data:`MAX_VALUE_BYTES`. Whatever the fork does - print a score line, write to fd 1 or
``sys.__stdout__``, close stdout, raise ``SystemExit``, patch the scorer or ``json``, start a thread
- stays in the fork: the score is computed in the parent from the value alone, and the parent is
made non-dumpable (no ``ptrace`` / ``process_vm_writev`` by the fork; ``/proc`` is hidden by the
harness). A value the fork forges is only an answer: the same value written as a literal. So the
fork must not reach the answer it is scored against: the ``eval`` runs on a thread of its own
(its frames end there, not in ``score_answer``'s, whose ``entry`` holds it) and a bare
``eval(text)`` gets the builtins alone as its globals (not the scorer's ``job`` / ``entry``).
Code past the reward's guard can still find the entry in the fork's memory (``gc``): the
channel keeps the score out of an answer's hands, the guard keeps the answer from code.
"""

import builtins
import json
import os
import select
import signal
import struct
import sys
import time

VERDICT_FD = 3
"""The harness's verdict pipe in the scorer's process (the ``verdict`` job option of the harness)."""
EVAL_TIME_S = 6.0
"""One contained ``eval``'s wall time (the harness gives the whole sample 10 s)."""
MAX_VALUE_BYTES = 1 << 20
MAX_DEPTH = 200
SYMPY_CLASSES = frozenset({
    "Add", "Mul", "Pow", "Tuple", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "exp", "log", "sin", "cos", "tan", "cot",
    "sec", "csc", "asin", "acos", "atan", "acot", "sinh", "cosh", "tanh", "coth", "asinh", "acosh", "atanh", "Abs",
    "sign", "floor", "ceiling", "factorial", "binomial", "Min", "Max", "re", "im", "conjugate"})
"""Classes a sympy tree may hold besides numbers, symbols and :data:`SYMPY_CONSTANTS` (each is
``sympy.<name>``; a tree naming another class is not a value)."""
SYMPY_CONSTANTS = frozenset({"Pi", "Exp1", "ImaginaryUnit", "Infinity", "NegativeInfinity", "ComplexInfinity",
                             "NaN", "EulerGamma", "GoldenRatio", "Catalan"})
_SEQUENCES = {list: "l", tuple: "t", set: "S", frozenset: "F"}
_ORIGINAL_EVAL = builtins.eval


def _encode_sympy(value, depth):
    import sympy

    kind = type(value)
    if kind is sympy.Symbol:  # with the assumptions it was made with (real=True, ...)
        return ["Y", value.name, {k: v for k, v in getattr(value, "_assumptions_orig", {}).items() if type(v) is bool}]
    if isinstance(value, sympy.Integer):
        return ["I", format(int(value), "x")]
    if isinstance(value, sympy.Rational):
        return ["Q", format(int(value.p), "x"), format(int(value.q), "x")]
    if kind is sympy.Float:
        return ["R", [int(x) for x in value._mpf_], int(value._prec)]
    if kind.__name__ in SYMPY_CONSTANTS and value is getattr(sympy.S, kind.__name__, None):
        return ["K", kind.__name__]
    if kind.__name__ in SYMPY_CLASSES and getattr(sympy, kind.__name__, None) is kind:
        return ["E", kind.__name__, [encode(a, depth + 1) for a in value.args]]
    raise ValueError(f"a value of type {kind.__name__}")


def encode(value, depth=0):
    """``value`` as tagged JSON-able data (module docstring); ``ValueError`` for anything else."""
    kind = type(value)
    if depth > MAX_DEPTH:
        raise ValueError("a value nested too deep")
    if value is None:
        return ["n"]
    if kind is bool:
        return ["b", value]
    if kind is int:
        return ["i", format(value, "x")]
    if kind is float:
        return ["f", value.hex()]
    if kind is complex:
        return ["c", value.real.hex(), value.imag.hex()]
    if kind is str:
        return ["s", value]
    if kind is bytes:
        return ["y", value.hex()]
    if kind in _SEQUENCES:
        return [_SEQUENCES[kind], [encode(x, depth + 1) for x in value]]
    if kind is dict:
        return ["d", [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]]
    if "sympy" in sys.modules and isinstance(value, sys.modules["sympy"].Basic):
        return _encode_sympy(value, depth)
    raise ValueError(f"a value of type {kind.__name__}")


def _decode_sympy(tag, data, depth):
    import sympy

    if tag == "Y" and type(data[1]) is str and type(data[2]) is dict:
        return sympy.Symbol(data[1], **{str(k): bool(v) for k, v in data[2].items()})
    if tag == "I":
        return sympy.Integer(int(data[1], 16))
    if tag == "Q":
        return sympy.Rational(int(data[1], 16), int(data[2], 16))
    if tag == "R" and len(data[1]) == 4 and all(type(x) is int for x in data[1]) and type(data[2]) is int:
        return sympy.Float._new(tuple(data[1]), data[2])
    if tag == "K" and data[1] in SYMPY_CONSTANTS:
        return getattr(sympy.S, data[1])
    if tag == "E" and data[1] in SYMPY_CLASSES and type(data[2]) is list:
        return getattr(sympy, data[1])(*[decode(a, depth + 1) for a in data[2]], evaluate=False)
    raise ValueError(f"not a value: tag {tag!r}")


def decode(data, depth=0):
    """The value :func:`encode` wrote; ``ValueError`` (or ``TypeError``) for anything else."""
    if depth > MAX_DEPTH or type(data) is not list or not data or type(data[0]) is not str:
        raise ValueError("not a value")
    tag = data[0]
    if tag == "n":
        return None
    if tag == "b" and type(data[1]) is bool:
        return data[1]
    if tag == "i":
        return int(data[1], 16)
    if tag == "f":
        return float.fromhex(data[1])
    if tag == "c":
        return complex(float.fromhex(data[1]), float.fromhex(data[2]))
    if tag == "s" and type(data[1]) is str:
        return data[1]
    if tag == "y":
        return bytes.fromhex(data[1])
    if tag in ("l", "t", "S", "F") and type(data[1]) is list:
        items = [decode(x, depth + 1) for x in data[1]]
        return {"l": list, "t": tuple, "S": set, "F": frozenset}[tag](items)
    if tag == "d" and type(data[1]) is list:
        return {decode(k, depth + 1): decode(v, depth + 1) for k, v in data[1]}
    return _decode_sympy(tag, data, depth)


_RUNNER: dict = {"__builtins__": builtins}
exec("def run(evaluate, args, kwargs, out):\n"  # globals of its own: no frame of the answer's reaches the scorer's
     "    try:\n        out.append((True, evaluate(*args, **kwargs)))\n"
     "    except BaseException as err:\n        out.append((False, err))\n", _RUNNER)


def _evaluate(args, kwargs):
    """The ``eval`` itself, on a thread of its own, a bare ``eval(text)`` given the builtins alone as
    its globals: the answer's frames (a generator's ``gi_frame.f_back``, read by ``str.format``) end
    in the thread's start, never in the scorer's frames or globals, whose ``entry`` holds the answer
    it is scored against (``score_answer``'s own ``eval`` would have given it ``entry``)."""
    import threading

    if len(args) == 1 and "globals" not in kwargs:
        args = (args[0], {"__builtins__": builtins})
    out = []
    thread = threading.Thread(target=_RUNNER["run"], args=(_ORIGINAL_EVAL, args, kwargs, out), daemon=True)
    thread.start()
    thread.join()
    if not out:
        raise ValueError("the evaluated answer gave no value")
    if not out[0][0]:
        raise out[0][1]  # SystemExit too: the fork then ends without a value
    return out[0][1]


def _in_fork(write_fd, args, kwargs):
    """The fork's body (never returns): no verdict descriptor, then the ``eval``, then its value."""
    code = 1
    try:
        try:
            os.close(VERDICT_FD)
        except OSError:
            pass
        os.setpgid(0, 0)
        builtins.eval = _ORIGINAL_EVAL
        try:
            data = json.dumps(["ok", encode(_evaluate(args, kwargs))]).encode()
        except Exception as err:  # noqa: BLE001 - the eval's error is raised again in the parent
            data = json.dumps(["error", type(err).__name__, str(err)[:200]]).encode()
        data = struct.pack(">Q", len(data)) + data
        while data:
            data = data[os.write(write_fd, data):]
        code = 0
    finally:
        os._exit(code)


def _receive(read_fd):
    """What the fork sent (``None`` when it sent nothing whole), waiting :data:`EVAL_TIME_S` at most."""
    data, until = b"", time.monotonic() + EVAL_TIME_S
    while len(data) < 8 or len(data) < 8 + struct.unpack(">Q", data[:8])[0]:
        if len(data) > MAX_VALUE_BYTES + 8:
            return None
        left = until - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"an evaluated answer ran past {EVAL_TIME_S:g} s")
        if select.select([read_fd], [], [], left)[0]:
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                return None
            data += chunk
    return data[8:8 + struct.unpack(">Q", data[:8])[0]]


def _fork(read_fd, write_fd, args, kwargs):
    """Fork; the child never returns here: signals are blocked across the ``fork()`` (no handler
    of the scorer's runs in the child) and the child's first statement is a ``try`` that ends in
    ``os._exit`` (no exception, ``atexit`` function or buffered output of the scorer's follows it)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()  # else the fork's print would write the scorer's buffered text again
        except Exception:  # noqa: BLE001
            pass
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    pid = -1
    try:
        pid = os.fork()
        if pid == 0:
            try:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
                os.close(read_fd)
                _in_fork(write_fd, args, kwargs)
            finally:
                os._exit(1)
    finally:
        if pid != 0:
            _restore_mask(mask, pid)
    return pid


def _kill_and_reap(pid):
    """The fork ``pid`` and its process group killed, then reaped."""
    for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            kill()
        except OSError:
            pass
    os.waitpid(pid, 0)


def _restore_mask(mask, pid):
    """The mask as it was; when the handler of a signal held across the fork raises, the fork (whose
    pid the caller will never get) is killed and reaped first (``steadyrl/sandbox/forking.py``)."""
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    except BaseException:
        if pid > 0:
            _kill_and_reap(pid)
        raise


def contained_eval(*args, **kwargs):
    """``eval(*args, **kwargs)`` in a fork without the verdict descriptor; its value, decoded."""
    read_fd, write_fd = os.pipe()
    try:
        pid = _fork(read_fd, write_fd, args, kwargs)
    except BaseException:  # no fork (EAGAIN under the harness's process limit): the pipe is not kept
        os.close(read_fd), os.close(write_fd)
        raise
    os.close(write_fd)
    try:
        data = _receive(read_fd)
    finally:
        os.close(read_fd)
        _kill_and_reap(pid)
    if data is None:
        raise ValueError("the evaluated answer gave no value")
    message = json.loads(data)
    if type(message) is not list or not message or message[0] not in ("ok", "error"):
        raise ValueError("the evaluated answer gave no value")
    if message[0] == "error":
        raise ValueError(f"the evaluated answer failed: {str(message[1:])[:300]}")
    return decode(message[1])


def contain_eval():
    """From now on every ``eval`` of this process runs contained (module docstring); the process
    becomes non-dumpable, so a fork cannot trace it."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass
    builtins.eval = contained_eval


def verdict(score):
    """Send ``score`` (a number) to the harness on :data:`VERDICT_FD`: the only score it reads."""
    line = (json.dumps({"score": float(score)}) + "\n").encode()
    while line:
        line = line[os.write(VERDICT_FD, line):]
