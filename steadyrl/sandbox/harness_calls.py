"""The program's side of ``calls`` jobs, for :mod:`steadyrl.sandbox.harness` (standard library only,
imported by the harness as a top-level module; it runs in the child, after the program).

The child runs the program (and the tests' setup), says ``{"ready": true}`` on fd 3, then answers
one request at a time: the harness writes a case on fd 4 (one JSON line) and waits for the reply
on fd 3 before it sends the next, and it alone keeps each case's clock (from its request to the
reply), so nothing the program writes can give it more time or tell it a later case.

A case is ``{"case": i, "fn": name, "args": [...], "kwargs": {...}}`` - call ``name`` (a top-level
function of the program, or a method of its class ``Solution``) and return what it returned as
*plain data* - or ``{"case": i, "exec": statement}``, an ``assert`` statement that could not be
turned into calls, run in the program's namespace (the program can cheat those: see
docs/rewards.md). Arguments and values are tagged JSON (:func:`encode`), so a tuple stays a tuple
and a set a set; a value of any other type (a user class, a subclass of ``int`` with its own
``__eq__``, a generator) is sent as ``["?", type name]``, which equals nothing on the other side.
"""

import json
import os
import sys
import traceback

MAX_DEPTH = 100
_SEQUENCES = {list: "l", tuple: "t", set: "S", frozenset: "F"}
_TYPES = {"l": list, "t": tuple, "S": set, "F": frozenset}


def encode(value, depth=0):
    """``value`` as tagged JSON-able data; exact built-in types only (subclasses are foreign)."""
    kind = type(value)
    if depth > MAX_DEPTH:
        return ["?", "too deep"]
    if value is None:
        return ["n"]
    if kind is bool:
        return ["b", value]
    if kind is int:
        return ["i", format(value, "x")]  # hex: no 4,300-digit limit on the way
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
    return ["?", kind.__name__]


def decode(data):
    """The arguments the harness sent (encoded by the reward with :func:`encode`'s tags)."""
    tag = data[0]
    if tag == "n":
        return None
    if tag == "b":
        return bool(data[1])
    if tag == "i":
        return int(data[1], 16)
    if tag == "f":
        return float.fromhex(data[1])
    if tag == "c":
        return complex(float.fromhex(data[1]), float.fromhex(data[2]))
    if tag == "s":
        return data[1]
    if tag == "y":
        return bytes.fromhex(data[1])
    if tag in _TYPES:
        return _TYPES[tag](decode(x) for x in data[1])
    if tag == "d":
        return {decode(k): decode(v) for k, v in data[1]}
    raise ValueError(f"unknown tag {tag!r}")


def _function(namespace, name):
    fn = namespace.get(name)
    if fn is None and "Solution" in namespace:
        fn = getattr(namespace["Solution"](), name, None)
    if not callable(fn):
        raise NameError(f"the program defines no function {name!r}")
    return fn


def _answer(namespace, case):
    """The reply to one request (what the program did; its exceptions are the case's result)."""
    i = case["case"]
    try:
        if "exec" in case:
            exec(compile(case["exec"], "tests.py", "exec"), namespace)
            return {"case": i, "status": "ok"}
        fn = _function(namespace, case["fn"])
        args = [decode(a) for a in case["args"]]
        kwargs = {k: decode(v) for k, v in case.get("kwargs", {}).items()}
        value = fn(*args, **kwargs)
        try:
            tagged = encode(value)
        except RecursionError:
            tagged = ["?", "too deep"]
        return {"case": i, "status": "ok", "value": tagged}
    except AssertionError as err:
        return {"case": i, "status": "wrong_answer", "error": f"AssertionError: {err}"[:500]}
    except MemoryError:
        return {"case": i, "status": "memory", "error": "MemoryError"}
    except Exception as err:  # noqa: BLE001 - the program's error is the case's result
        return {"case": i, "status": "runtime_error", "error": f"{type(err).__name__}: {err}"[:500]}


def _lines(fd):
    """The request lines arriving on ``fd``, one at a time, until it closes."""
    buffer = b""
    while True:
        while b"\n" not in buffer:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return
            buffer += chunk
        line, buffer = buffer.split(b"\n", 1)
        yield line


def _send(fd, reply):
    data = (json.dumps(reply) + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def serve(job, namespace, report=3, requests=4):
    """After the program ran in ``namespace``: the setup, ``ready``, then one reply per request."""
    if job.get("setup"):
        exec(compile(job["setup"], "tests.py", "exec"), namespace)
    _send(report, {"ready": True})
    for line in _lines(requests):
        reply = _answer(namespace, json.loads(line))
        try:
            sys.stdout.flush()
        except Exception:  # noqa: BLE001
            pass
        _send(report, reply)


def _exit_code(err):
    return err.code if isinstance(err.code, int) else (0 if err.code is None else 1)


def _run(job):
    """Run the program (then, for ``calls``, :func:`serve`); its exit code."""
    try:
        namespace = {"__name__": "__main__", "__builtins__": __builtins__}
        exec(compile(job["source"], "solution.py", "exec"), namespace)
        if job["mode"] != "stdio":
            serve(job, namespace)
        return 0
    except SystemExit as err:
        return _exit_code(err)
    except MemoryError:
        os.write(2, b"MemoryError\n")
        return 120
    except BaseException:  # noqa: BLE001 - the program's error is the test's result
        traceback.print_exc()
        return 1


def _finish(code):
    """What the interpreter does at its end: wait for the non-daemon threads (a program that starts
    a thread and never joins it, as ``threading.stack_size(2**26)`` solutions do), then run the
    ``atexit`` functions. The harness's time limit bounds both; an error in either is the program's."""
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        if "atexit" in sys.modules:
            sys.modules["atexit"]._run_exitfuncs()
    except SystemExit as err:
        code = code or _exit_code(err)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        code = code or 1
    return code


def run_program(job):
    """The child's body: run the program, end it as the interpreter would (:func:`_finish`), flush
    its output; never returns, not even when the program's error handling raises (its own
    ``sys.stderr`` raising in ``traceback.print_exc``): that ends the child with status 1."""
    code = 1
    try:
        code = _finish(_run(job))
        try:
            sys.stdout.flush(), sys.stderr.flush()
        except BaseException:  # noqa: BLE001
            pass
    finally:
        os._exit(code)
