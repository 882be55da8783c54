"""steadyrl.sandbox: running untrusted code - reward functions now, tools and environments of
multi-turn rollouts next - in a persistent worker process that contains what it runs.

Below ``rewards/`` and ``rollout/``; imports only the standard library. Linux only (``fork``,
``/proc``, ``prctl``); elsewhere :class:`Sandbox` raises :class:`SandboxUnavailable` (a
reward's ``isolation: process`` is then a config error; ``thread`` is the default there).

The API::

    box = Sandbox(target, limits=Limits(...), env_passthrough=("HF_HOME",))
    reply = box.call(request, timeout_s=5.0)      # or: call = box.submit(request); call.wait(5.0)
    reply.status    # "ok" | "error" (target raised) | "timeout" | "died"
    reply.parts     # JSON-decoded values: what target returned, or each value it yielded
    reply.value     # parts[-1]
    reply.error     # traceback / time-out / death message, with the tail of the worker's output
    reply.output    # the tail of the worker's stdout + stderr (reply.output_bytes: how much in all)
    reply.elapsed_s
    box.kill()      # kill the worker and all it started now (the next call forks a fresh one)
    box.close()     # or: with Sandbox(target) as box: ...

``Sandbox(...)`` raises :class:`SandboxUnavailable` where there is no sandbox (not Linux), and so
does ``submit`` when no worker can be started; a request that cannot be pickled raises the
pickling error (the worker is unharmed). Nothing else raises: every failure of the target or the
worker is a ``Reply``. After ``"timeout"`` or ``"died"`` the worker is gone and its state with it;
after ``"error"`` it lives on.

``target(request)`` runs in the worker and returns a JSON-able value, or is a generator that yields
JSON-able values one at a time (streamed: a time-out keeps those already sent). ``request`` is any
picklable object. The worker is forked from the caller on the first call and kept, so ``target``
(a closure, a bound method, an object with ``__call__``) is inherited as it is and state it keeps
lives on between calls - a per-episode environment is one sandbox whose target holds the env::

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

What the worker contains (see :mod:`.child`, :mod:`.procs`, :mod:`.limits`):

* it dies with the trainer (``PR_SET_PDEATHSIG`` and a check of its parent pid), and then kills
  everything it started;
* on a time-out, a broken reply, ``close()``, or the trainer's death, every process it started is
  killed - its process group, its session, everything below its subreaper keeper, and every
  program carrying its environment tag (what escapes: :mod:`.procs`);
* the user's code runs in a runner whose parent is the keeper, never the trainer: signalling its
  parent fails the call, not the run;
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

What it does not do: it is not a security boundary against code that *means* harm while running
as the trainer's own user - such code can still read ``/proc/<trainer pid>/environ`` or signal the
trainer by pid. For that, run the trainer as a separate user or in a container.
"""

from .frames import MAX_FRAME_BYTES
from .limits import SECRET_PATTERNS, Limits, secret_names
from .procs import TAG_VAR, members
from .sandbox import Call, Rebuild, Reply, Sandbox, SandboxUnavailable, output_note

__all__ = ["Call", "Limits", "MAX_FRAME_BYTES", "Rebuild", "Reply", "SECRET_PATTERNS", "Sandbox", "SandboxUnavailable",
           "TAG_VAR", "members", "output_note", "secret_names"]
