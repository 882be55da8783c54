"""steadyrl.sandbox: running untrusted code - reward functions now, tools and environments of
multi-turn rollouts next - in a persistent worker process that contains what it runs.

Below ``rewards/`` and ``rollout/``; imports only the standard library. Linux only (``fork``,
``/proc``, ``prctl``); elsewhere :class:`Sandbox` raises :class:`SandboxUnavailable` (a
reward's ``isolation: process`` is then a config error; ``thread`` is the default there).

The API::

    box = Sandbox(Rebuild(make_target, "tools.py:run"), limits=Limits(...))   # a fresh worker
    box = Sandbox(target, limits=Limits(...), env_passthrough=("HF_HOME",))    # a forked worker
    reply = box.call(request, timeout_s=5.0)      # or: call = box.submit(request); call.wait(5.0)
    reply.status    # "ok" | "error" (target raised) | "timeout" | "died"
    reply.parts     # JSON-decoded values: what target returned, or each value it yielded
    reply.value     # parts[-1]
    reply.error     # traceback / time-out / death message, with the tail of the worker's output
    reply.output    # the tail of the worker's stdout + stderr (reply.output_bytes: how much in all)
    reply.elapsed_s
    box.kill()      # kill the worker and all it started now (the next call starts a new one)
    box.close()     # or: with Sandbox(target) as box: ...
    box.isolation   # what the worker got: "fresh,pid,proc" (see below)

**Fresh or forked.** ``Sandbox(Rebuild(factory, *args, **kwargs))`` starts a *fresh* worker: a new
interpreter (``python -m steadyrl.sandbox.worker``, exec'd) that calls ``factory(*args, **kwargs)``
once and serves what it returns. It holds nothing of the trainer's memory but ``args`` and
``kwargs`` - use it for anything that runs model-written code (the reward, tool and environment
specs of a config all do). Any other callable gets a *forked* worker that inherits the target as
it is (closures included) with a copy of the trainer's whole memory (its secrets too): for
trusted targets only.

``Sandbox(...)`` raises :class:`SandboxUnavailable` where there is no sandbox (not Linux), and so
does ``submit`` when no worker can be started; a request that cannot be pickled raises the
pickling error (the worker is unharmed). Nothing else raises: every failure of the target or the
worker is a ``Reply``. After ``"timeout"`` or ``"died"`` the worker is gone and its state with it;
after ``"error"`` it lives on.

``target(request)`` runs in the worker and returns a JSON-able value, or is a generator that yields
JSON-able values one at a time (streamed: a time-out keeps those already sent). ``request`` is any
picklable object. The worker is forked from the caller on the first call and kept, so ``target``
(a closure, a bound method, an object with ``__call__``) is inherited as it is and state it keeps
lives on between calls (the paragraph above says what a fresh worker gets instead) - a
per-episode environment is one sandbox whose target holds the env::

    class EnvServer:                          # one episode's environment, in a worker
        def __init__(self, make_env):
            self.make_env, self.env = make_env, None

        def __call__(self, request):
            method, args = request
            if method == "reset":
                self.env = self.make_env()
                return {"observation": self.env.reset(**args)}
            obs, reward, done = self.env.step(args["action"])
            return {"observation": obs, "reward": reward, "done": done}

    with Sandbox(EnvServer(make_env)) as box:
        first = box.call(("reset", {"seed": 0}), timeout_s=10).value
        step = box.call(("step", {"action": "ls"}), timeout_s=10)
        if step.status != "ok":
            ...                               # step.error says why; the episode ends

    tools = Sandbox(lambda req: TOOLS[req["name"]](**req["arguments"]))   # a tool returns text
    text = tools.call({"name": "python", "arguments": {"code": "print(1)"}}, timeout_s=5).value

What the worker contains (see :mod:`.child`, :mod:`.nsinit`, :mod:`.procs`, :mod:`.limits`):

* the user's code runs in a pid namespace of its own (own ``/proc``): the trainer's pid and the
  keeper's do not exist there, and its parent is the namespace's init, which the kernel shields
  from ``SIGKILL`` / ``SIGSTOP`` sent from inside; ``isolation`` says ``pid`` (``user+pid`` as
  another user) and ``proc`` when the kernel allowed them;
* it dies with the trainer (the keeper, out of the user's code's reach: ``PR_SET_PDEATHSIG`` and a
  check of its parent pid), and then kills everything it started (ending the init ends the
  namespace);
* on a time-out, a broken reply, ``close()``, or the trainer's death, every process it started is
  killed - its process group, its session, everything below its subreaper keeper, and every
  program carrying its environment tag (what escapes: :mod:`.procs`);
* replies are JSON, never unpickled by the trainer, read with a deadline (a half-written reply
  ends in a time-out), at most ``max_reply_bytes`` per part;
* stdout / stderr are kept (the last ``limits.output_kib`` KiB) and shown in failure messages,
  never poured into the trainer's log; the trainer's file descriptors are replaced by
  ``/dev/null``; credentials are removed from the environment (``SECRET_PATTERNS``, unless named
  in ``env_passthrough``);
* resource limits: address space, CPU seconds per call, processes, file size (:class:`Limits`).

One untrusted *program* against its test cases (the ``code`` reward):
:func:`steadyrl.sandbox.programs.run_program` runs it in a fresh ``python -I`` harness
(:mod:`.harness`, :mod:`.harness_os`) with its own user, pid, network and mount namespaces where the
kernel allows, resource limits, and nothing left running afterwards; see ``docs/rewards.md#code``.

What it does not do: it is not a file-system or network boundary - the user's code runs as the
trainer's user with the host's files and network. Without a pid namespace (a kernel that refuses
one to a non-root user) it can also signal the trainer by pid and read
``/proc/<trainer pid>/environ``. For hostile code, run the trainer as a separate user or in a container.
"""

from .frames import MAX_FRAME_BYTES
from .limits import SECRET_PATTERNS, Limits, secret_names
from .procs import TAG_VAR, members
from .sandbox import Call, Rebuild, Reply, Sandbox, SandboxUnavailable, output_note

__all__ = ["Call", "Limits", "MAX_FRAME_BYTES", "Rebuild", "Reply", "SECRET_PATTERNS", "Sandbox", "SandboxUnavailable",
           "TAG_VAR", "members", "output_note", "secret_names"]
