"""``rollout.multi_turn.agent``: a user's function that runs an episode against the gateway, and the rollout
that runs many of them at once.

The function takes the data row (``{"prompt": ..., **columns}``, as an environment's ``reset``
gets it) and either ``client`` (an ``openai.OpenAI`` client, or ``openai.AsyncOpenAI`` for an
``async def``, already pointed at the episode's base URL with the run's key) or ``base_url`` and
``api_key`` (for any other client). It returns the episode's reward, or None: then the reward
functions score the transcript. Its signature is checked when the config is loaded, before any
model (:func:`load_agent`): anything else exits 2.

Where it runs: in the trainer's process, ``async def`` functions on one event loop in a thread of
their own, plain functions in a pool of threads; ``rollout.multi_turn.agent_concurrency`` episodes at once. An
agent file is the user's own code, trusted as a reward file is (``steadyrl eval --output-dir``
of someone else's run refuses it without ``--trust-run-code``, :mod:`steadyrl.run.trust`); it is
not sandboxed, because it must reach the gateway on loopback and may use any library. Code the
*model* writes is another matter: an agent that runs it must use a sandbox of its own (the ``code``
reward's, :mod:`steadyrl.sandbox`).

An episode that raises, returns something that is not a number or None, makes no call, or runs
past ``rollout.multi_turn.agent_timeout_s`` is failed: left out of the update and counted
(``rollout/failed_episodes``, ``rollout/agent/errors``, ``rollout/agent/timeouts``); the run goes
on. An agent that raised because a call to the gateway was answered 5xx (503: no room) or its
connection failed is told apart (:func:`call_failure`, ``rollout/agent/gateway_errors``): a run that
stops for want of valid samples then blames the calls, not the reward functions. A plain function
past its time limit cannot be stopped: it is abandoned, and its further calls are refused (410),
so a client raises there.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import inspect
import threading
import traceback
from concurrent.futures import CancelledError, ThreadPoolExecutor

from ..errors import ConfigError
from ..agents.protocol import AgentBase
from ..secrets import redact_text
from ..userfn import SPEC_FORMS, resolve_spec
from .assemble import assemble, check_reward
from .record import EpisodeRecord
from .server import HOST, Gateway, ServerLimits
from .waves import WAVE_WAIT_S, Serving, Waves

EXAMPLE = "async def run_episode(row, client) -> float | None"


def _err(spec, what: str) -> ConfigError:
    return ConfigError(f"rollout.multi_turn.agent = {spec!r}: {what}")


def load_agent(spec: str):
    """``(fn, is_async, how)``: the agent function of ``spec`` and how it is called (``how``:
    ``client`` or ``url``). Raises ``ConfigError`` naming ``rollout.multi_turn.agent``."""
    if not isinstance(spec, str) or ":" not in spec:
        raise _err(spec, f"expected a function as {SPEC_FORMS}, e.g. {EXAMPLE}")
    fn = resolve_spec(spec.strip(), lambda what: _err(spec, what))
    if not callable(fn) or inspect.isclass(fn):
        raise _err(spec, f"{spec.rsplit(':', 1)[1]!r} is a {type(fn).__name__}, not a function; expected {EXAMPLE}")
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        raise _err(spec, f"its signature cannot be read; expected {EXAMPLE}") from None
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    shown = f"{fn.__name__}{inspect.signature(fn)}"
    if not positional and not any(p.kind == p.VAR_POSITIONAL for p in params):
        raise _err(spec, f"{shown} takes no data row; expected {EXAMPLE} (or (row, base_url, api_key))")
    rest = {p.name for p in params[1:] if p.kind != p.VAR_POSITIONAL}
    var_kw = any(p.kind == p.VAR_KEYWORD for p in params)
    how = "client" if "client" in rest or (var_kw and not {"base_url", "api_key"} & rest) else \
        "url" if {"base_url", "api_key"} <= rest else None
    if how is None:
        raise _err(spec, f"{shown} takes neither 'client' nor 'base_url' and 'api_key'; expected {EXAMPLE} "
                         "or def run_episode(row, base_url, api_key)")
    given = {"client"} if how == "client" else {"base_url", "api_key"}
    required = [p.name for p in params[1:] if p.default is p.empty and p.name not in given
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if required:
        raise _err(spec, f"{shown} requires {required}, which the rollout does not give; it passes the row and "
                         f"{sorted(given)}")
    if how == "client":
        import importlib.util

        if importlib.util.find_spec("openai") is None:
            raise _err(spec, "it takes an OpenAI 'client', and the openai package is not installed (pip install "
                             "openai, or take base_url and api_key instead)")
    return fn, inspect.iscoroutinefunction(fn), how


class GatewayAgent(AgentBase):
    """The agent of a run with ``rollout.multi_turn.agent``: :meth:`rollout` runs a step's episodes through
    the gateway (started on first use, stopped by :meth:`shutdown` at the end of the run)."""

    drives_episodes = True  # steadyrl.rollout.driver hands it the whole rollout
    splits_trajectories = True  # an episode that rewrote its history trains each trajectory (trainer.turn_samples)
    observation_role = "user"
    tool_schemas = None
    tools: dict = {}

    def __init__(self, spec: str, *, parser, concurrency: int, timeout_s: float, template_kwargs: dict | None = None,
                 wave_wait_s: float = WAVE_WAIT_S, processor=None):
        self.spec = spec
        self.processor = processor  # a vision-language policy's: image_url parts are rendered (else refused)
        self.splits_trajectories = processor is None  # turn samples carry no image inputs: the last trajectory
        self.fn, self.is_async, self.how = load_agent(spec)
        self.parser, self.concurrency, self.timeout_s, self.wave_wait_s = parser, concurrency, timeout_s, wave_wait_s
        self.template_kwargs = dict(template_kwargs or {})
        self.gateway: Gateway | None = None
        self.generate_calls = 0  # engine.generate calls of the last rollout (one per wave and setting)
        # kept for the run: the event loop the agents run on, one connection pool, and the episode
        # slots (a base URL and its client; an openai client costs milliseconds to make, per episode)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._http = None
        self._slots: list[tuple[str, dict]] = []

    def rollout(self, engine, tokenizer, prompts: list, n: int, limits, *, seeds=None, **sampling):
        """``n`` episodes of each prompt (rows in group order) as a ``Generation``."""
        from ..rollout.hf import HFEngine

        if self.gateway is None:
            self.gateway = Gateway(ServerLimits.for_concurrency(self.concurrency))
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name="steadyrl-agents", daemon=True)
            self._thread.start()
        episodes = [EpisodeRecord({"prompt": p.messages if p.messages is not None else p.text, **p.columns}, "")
                    for p in prompts for _ in range(n)]
        serving = Serving(self.parser, self.template_kwargs, self.timeout_s, self.concurrency, self.wave_wait_s,
                          self.processor)
        waves = Waves(engine, tokenizer, episodes, serving, sampling=sampling,
                      max_new_tokens=min(limits.max_new_tokens, limits.episode_tokens))
        self.gateway.submit = waves.submit
        running = asyncio.run_coroutine_threadsafe(self._main(episodes, waves), self._loop)
        running.add_done_callback(lambda _: waves.all_over())
        try:
            waves.serve()
        except BaseException:  # interrupted (Ctrl-C, a failing engine): the episodes are cancelled
            self._loop.call_soon_threadsafe(running.cancel)
            raise
        finally:
            self.gateway.submit = Gateway._closed
            waves.abort()  # episodes not over are refused from here on
            with contextlib.suppress(CancelledError):
                running.result()
        self.generate_calls = waves.generate_calls
        return assemble(episodes, tokenizer, limits.episode_tokens, keep_logprobs=not isinstance(engine, HFEngine),
                        split=self.processor is None)

    async def _main(self, episodes: list[EpisodeRecord], waves: Waves) -> None:
        limit = asyncio.Semaphore(self.concurrency)
        pool = None if self.is_async else ThreadPoolExecutor(max_workers=min(self.concurrency, len(episodes)),
                                                             thread_name_prefix="steadyrl-agent")
        if self._http is None and self.how == "client":  # one connection pool for every episode's client
            import openai

            self._http = (openai.DefaultAsyncHttpxClient if self.is_async else openai.DefaultHttpxClient)(
                timeout=self.timeout_s)
        try:
            await asyncio.gather(*(self._one(e, waves, limit, pool) for e in episodes))
        finally:
            if pool is not None:  # an abandoned (timed-out) plain function is not waited for
                pool.shutdown(wait=False, cancel_futures=True)

    def _slot(self) -> tuple[str, dict]:
        """A free episode slot: its token (in its base URL) and the arguments the agent gets."""
        if self._slots:
            return self._slots.pop()
        token = Gateway.new_token()
        base_url, key = self.gateway.base_url(token), self.gateway.api_key
        if self.how == "url":
            return token, {"base_url": base_url, "api_key": key}
        import openai

        make = openai.AsyncOpenAI if self.is_async else openai.OpenAI
        return token, {"client": make(base_url=base_url, api_key=key, max_retries=0, timeout=self.timeout_s,
                                      http_client=self._http)}

    async def _one(self, e: EpisodeRecord, waves: Waves, limit: asyncio.Semaphore, pool) -> None:
        async with limit:
            slot = self._slot()
            if not waves.bind(slot[0], e):  # the rollout was interrupted before this episode started
                self._slots.append(slot)
                return
            row, kwargs = copy.deepcopy(e.row), slot[1]
            try:
                if self.is_async:
                    call = self.fn(row, **kwargs)
                else:
                    call = asyncio.get_running_loop().run_in_executor(pool, lambda: self.fn(row, **kwargs))
                value = await asyncio.wait_for(call, self.timeout_s)
                e.reward, e.error = check_reward(value)
                e.failed = e.error is not None
            except asyncio.TimeoutError:
                e.failed, e.timed_out = True, True
                e.error = f"the agent ran past rollout.multi_turn.agent_timeout_s = {self.timeout_s:g} s"
            except Exception as err:  # noqa: BLE001 - an agent's failure fails its episode, not the run
                e.failed, e.error = True, _raised(err)
                e.call_failure = call_failure(err, f"http://{HOST}:{self.gateway.port}/")
            finally:
                waves.episode_over(e)
                if not e.timed_out:  # an abandoned agent may still hold its slot's client: that slot retires
                    self._slots.append(slot)

    def close(self, states) -> None:
        pass

    def shutdown(self) -> None:
        """The end of the run: the gateway stops listening, the agents' loop and connections go."""
        if self.gateway is None:
            return
        self.gateway.close()
        self.gateway = None
        if self._http is not None:
            if self.is_async:
                asyncio.run_coroutine_threadsafe(self._http.aclose(), self._loop).result(timeout=10)
            else:
                self._http.close()
            self._http = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self._slots.clear()


MAX_TRACEBACK_CHARS = 4000
"""The end of an agent's traceback kept with its failed episode (printed once per run)."""


def _raised(err: Exception) -> str:
    """What an agent that raised left: its exception, then its traceback (the end of it), with every
    secret the run has read redacted (the agent's own code may quote a key it was given)."""
    trace = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    return redact_text(f"the agent raised {type(err).__name__}: {str(err)[:500]}\n{trace[-MAX_TRACEBACK_CHARS:]}")


_CONNECTION_ERRORS = frozenset({"APIConnectionError", "ConnectError", "RemoteProtocolError", "ReadError", "WriteError",
                                "URLError", "ConnectionError"})
"""Exception classes (by name: openai's, httpx's, urllib's, requests', the builtin) of a call whose
connection failed; their timeouts are not (a slow answer is the agent's time limit's business)."""
_TIMEOUTS = frozenset({"APITimeoutError", "TimeoutException", "Timeout", "TimeoutError"})
_NEVER_THE_GATEWAYS = frozenset({"ConnectionRefusedError", "gaierror"})
"""What a call to the gateway does not raise while its rollout runs: it listens on 127.0.0.1 all
along (full, it accepts and answers 503), and is called by address, not by a name to resolve. A
call to another service (a tool server that is down, a web API offline) does."""


def call_failure(err: BaseException, gateway_url: str) -> str | None:
    """How a call of the agent to the gateway failed, if that is why it raised: ``"HTTP 503"`` (any
    5xx answer) or ``"connection error (ConnectError)"``; None otherwise (a 4xx is the agent's own
    mistake; an error about another URL is not the gateway's, nor are the errors it was raised from,
    nor a refused connect or a name that did not resolve: :data:`_NEVER_THE_GATEWAYS`). Looks through
    ``err``'s causes (an agent's framework may wrap the client's error), 16 deep at most."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen and len(seen) < 16:
        seen.add(id(err))
        url = _url(err)
        if url is not None and not url.startswith(gateway_url):
            return None  # a call to another service; its causes (httpx's, the OS's: no URL) are that call's
        reason = getattr(err, "reason", None)  # urllib's URLError: the OS's error
        names = {c.__name__ for c in (*type(err).__mro__, *(type(reason).__mro__ if isinstance(reason, BaseException)
                                                              else ()))}
        if url is None and names & _NEVER_THE_GATEWAYS:
            return None
        status = _status(err)
        if status is not None and 500 <= status <= 599:
            return f"HTTP {status}"
        if status is None and names & _CONNECTION_ERRORS and not names & _TIMEOUTS:
            return f"connection error ({type(err).__name__})"
        err = err.__cause__ or err.__context__
    return None


def _status(err: BaseException) -> int | None:
    """The HTTP status an exception carries: openai's ``status_code``, urllib's ``code``, a
    ``response.status_code`` (httpx, requests)."""
    for value in (getattr(err, "status_code", None), getattr(err, "code", None),
                  getattr(getattr(err, "response", None), "status_code", None)):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _url(err: BaseException) -> str | None:
    """The URL the failed call went to, when the exception says (openai, httpx, requests: its
    ``request.url``; urllib: ``url``)."""
    try:
        request = getattr(err, "request", None)  # httpx raises when an exception has no request
    except RuntimeError:
        request = None
    for value in (getattr(request, "url", None), getattr(err, "url", None)):
        if value is not None:
            return str(value)
    return None
