"""Answering the calls of a rollout's episodes: one ``generate`` per wave of pending calls.

The HTTP threads only queue checked requests (:meth:`Waves.submit` blocks until the answer). The
rollout's own thread (:meth:`Waves.serve`) takes *waves*: it waits until every running episode has
a call pending, or until the first call of the wave has waited as long as the last ``generate``
took (at least :data:`WAVE_WAIT_S`, at most :data:`MAX_WAVE_WAIT_S`: an agent busy with its own work
does not hold the others back for long, and a wave sent early costs about one more generate), then
renders each call's prompt ids, and sends all of them to the engine at once, one ``generate`` per
distinct sampling setting (``n``, temperature, top-p; usually one), with the largest ``max_tokens``
of the group (each call's answer is cut to its own); calls with the same prompt ids are one prompt
sampled several times (:func:`shared_prompts`). Every answer is recorded in its episode
(:mod:`.record`) before it is sent.

Sampling: a call samples with the run's ``rollout.temperature`` / ``top_p`` / ``top_k`` unless it
sets ``temperature`` / ``top_p`` (honoured; a call whose setting differs from the run's is counted
in ``rollout/agent/off_policy_calls``: the loss assumes the run's); ``temperature: 0`` is greedy.
``max_tokens`` is capped at ``rollout.max_new_tokens``.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

from .protocol import Choice, Request, RequestError, chat_body, completion_body
from .record import EpisodeRecord, Served, appended_chat_ids, appended_text_ids
from .server import MODEL_NAME

WAVE_WAIT_S = 0.05
"""Least time a pending call waits for the other running episodes' calls before its wave is sent."""
MAX_WAVE_WAIT_S = 1.0
"""Most time it waits: as long as the last generate took (a wave sent early costs another one), within this."""


@dataclass(frozen=True)
class Serving:
    """How a rollout's calls are answered, the same for every call: the agent's tool-call ``parser``,
    the chat template's ``template_kwargs`` (and a VLM's ``processor``, None for a text model), a
    call's ``timeout_s``, the ``concurrency`` of episodes and the least ``wave_wait_s`` of a wave
    (module docstring)."""

    parser: object
    template_kwargs: dict
    timeout_s: float
    concurrency: int
    wave_wait_s: float = WAVE_WAIT_S
    processor: object = None


@dataclass
class _Pending:
    episode: EpisodeRecord
    request: Request
    done: threading.Event
    answer: tuple[int, dict] | None = None
    prompt_ids: list[int] | None = None
    since: float = 0.0
    image_inputs: dict | None = None  # a VLM's: the image inputs of the prompt's images (all of them)


class Waves:
    """The calls of one rollout: queued by :meth:`submit` (HTTP threads), answered by :meth:`serve`."""

    def __init__(self, engine, tokenizer, episodes: list[EpisodeRecord], serving: Serving, *, sampling: dict,
                 max_new_tokens: int):
        """``sampling``: the run's sampling settings (``temperature``, ``top_p``, ``top_k``); ``max_new_tokens``:
        the cap of a call's ``max_tokens``."""
        self.engine, self.tokenizer, self.processor = engine, tokenizer, serving.processor
        self.episodes: dict[str, EpisodeRecord] = {}  # the token of each running episode's slot
        self.sampling, self.max_new_tokens, self.parser = sampling, max_new_tokens, serving.parser
        self.template_kwargs, self.timeout_s = serving.template_kwargs, serving.timeout_s
        self.wave_wait_s, concurrency = serving.wave_wait_s, serving.concurrency
        self.eos = set(engine.eos_ids)
        self.end_texts = [tokenizer.decode([i]) for i in sorted(self.eos)]
        self.cond = threading.Condition()
        self.pending: list[_Pending] = []
        self.all = episodes
        self.concurrency, self.left = concurrency, len(episodes)  # episodes not over yet
        self.running = min(concurrency, self.left)  # episodes running (or starting): a full wave has their calls
        self.finished = False  # every episode is over
        self.generate_calls = 0
        self.rendered: dict[str, list[int]] = {}  # a fresh chat call's prompt ids, by its messages and tools
        self.last_generate_s = 0.0

    # --- HTTP threads -------------------------------------------------------------------------
    def submit(self, token: str, request: Request) -> tuple[int, dict]:
        episode = self.episodes.get(token)
        if episode is None:
            raise RequestError("unknown episode in the base URL", status=404, kind="not_found_error")
        item = _Pending(episode, request, threading.Event(), since=time.monotonic())
        with self.cond:
            if episode.closed:
                raise RequestError("this episode is over (it returned, raised or ran out of "
                                   "rollout.multi_turn.agent_timeout_s)",
                                   status=410)
            self.pending.append(item)
            self.cond.notify_all()
        if not item.done.wait(self.timeout_s + 60):
            raise RequestError("the gateway did not answer in time", status=504)
        return item.answer

    # --- the episode runner -------------------------------------------------------------------
    def bind(self, token: str, episode: EpisodeRecord) -> bool:
        """Calls to base URL ``token`` are ``episode``'s from now on (False: the rollout was interrupted)."""
        with self.cond:
            if episode.closed:
                self.left -= 1
                self.running = min(self.concurrency, self.left)
                self.cond.notify_all()
                return False
            episode.token = token
            self.episodes[token] = episode
            return True

    def episode_over(self, episode: EpisodeRecord) -> None:
        """``episode`` returned, raised or timed out: its pending calls are refused from now on."""
        with self.cond:
            self.left -= 1
            self.running = min(self.concurrency, self.left)
            episode.closed = True
            self.episodes.pop(episode.token, None)
            for item in [p for p in self.pending if p.episode is episode]:
                self.pending.remove(item)
                self._answer(item, 410, {"error": {"message": "this episode is over", "type": "invalid_request_error",
                                                   "param": None, "code": None}})
            self.cond.notify_all()

    def abort(self) -> None:
        """Every episode not over yet is: its pending and later calls are refused (the rollout stops)."""
        with self.cond:
            for episode in self.all:
                episode.closed = True
            for item in self.pending:
                self._answer(item, 410, {"error": {"message": "the rollout stopped", "type": "invalid_request_error",
                                                   "param": None, "code": None}})
            self.pending = []

    def all_over(self) -> None:
        with self.cond:
            self.finished = True
            self.cond.notify_all()

    # --- the rollout's thread -----------------------------------------------------------------
    def serve(self) -> None:
        """Answer waves of calls until every episode is over."""
        while True:
            with self.cond:
                while not self.pending and not self.finished:
                    self.cond.wait()
                if not self.pending and self.finished:
                    return
                wait = min(max(self.wave_wait_s, self.last_generate_s), MAX_WAVE_WAIT_S)
                while self.pending and len(self.pending) < self.running:
                    left = self.pending[0].since + wait - time.monotonic()
                    if left <= 0:
                        break
                    self.cond.wait(left)
                wave, self.pending = self.pending, []
            self._wave(wave)

    @staticmethod
    def _answer(item: _Pending, status: int, body: dict) -> None:
        item.answer = (status, body)
        item.done.set()

    def _prompt_ids(self, item: _Pending) -> list[int]:
        from ..agents.chat import TemplateError, render

        req, served, tok = item.request, item.episode.last, self.tokenizer
        if req.images:
            return self._image_prompt_ids(item)
        if req.chat:
            ids = appended_chat_ids(served, req.messages, req.tools, tok, end_texts=self.end_texts,
                                    template_kwargs=self.template_kwargs)
            if ids is not None:
                return ids
            key = json.dumps([req.messages, req.tools], sort_keys=True, default=str)
            if key not in self.rendered:  # a group's episodes open with the same messages: rendered once
                try:
                    text = render(tok, req.messages, tools=req.tools, add_generation_prompt=True,
                                  purpose="the request's messages", template_kwargs=self.template_kwargs)
                except TemplateError as err:
                    raise RequestError(str(err), param="messages") from None
                self.rendered[key] = tok(text, add_special_tokens=False)["input_ids"]
            return list(self.rendered[key])
        if req.prompt_ids is not None:
            vocab = len(tok)
            if max(req.prompt_ids) >= vocab:
                raise RequestError(f"prompt token id {max(req.prompt_ids)} is not below the vocabulary size {vocab}",
                                   param="prompt")
            return list(req.prompt_ids)
        return appended_text_ids(served, req.prompt, tok) or tok(req.prompt, add_special_tokens=False)["input_ids"]

    def _image_prompt_ids(self, item: _Pending) -> list[int]:
        """A chat call with images: the whole conversation rendered with the processor's template and
        tokenized by the processor, each image's placeholder expanded into its tokens (an episode's
        earlier calls are a prefix of it when the template appends: the chain then holds the new
        messages, their images' tokens included, as observation tokens). A text policy refuses it."""
        from ..agents.chat import TemplateError, render
        from ..rollout.episode_images import processed, template_of

        req = item.request
        if self.processor is None:
            raise RequestError("a message holds an image, but this policy is a text model (it has no image "
                               "processor): send text only, or train a vision-language model", param="messages")
        try:
            text = render(template_of(self.tokenizer, self.processor), req.messages, tools=req.tools,
                          add_generation_prompt=True, purpose="the request's messages",
                          template_kwargs=self.template_kwargs)
            ids, item.image_inputs = processed(self.processor, text, req.images)
        except TemplateError as err:
            raise RequestError(str(err), param="messages") from None
        except (ValueError, TypeError) as err:  # the template placed fewer placeholders than images ...
            raise RequestError(f"the processor could not tokenize the messages' {len(req.images)} image(s): "
                               f"{type(err).__name__}: {err}", param="messages") from None
        return ids

    def _settings(self, req: Request) -> tuple[int, float, float, bool]:
        s = self.sampling
        greedy = not s.get("do_sample", True) or req.temperature == 0
        temperature = float(req.temperature if req.temperature is not None else s.get("temperature", 1.0))
        top_p = float(req.top_p if req.top_p is not None else s.get("top_p", 1.0))
        return req.n, (1.0 if greedy else temperature), (1.0 if greedy else top_p), not greedy

    def _wave(self, wave: list[_Pending]) -> None:
        groups: dict[tuple, list[_Pending]] = {}
        for item in wave:
            try:
                item.prompt_ids = self._prompt_ids(item)
            except RequestError as err:
                from .protocol import error_body

                self._answer(item, err.status, error_body(err))
                continue
            groups.setdefault(self._settings(item.request), []).append(item)
        for (n, temperature, top_p, sample), items in groups.items():
            budget = max(min(i.request.max_tokens or self.max_new_tokens, self.max_new_tokens) for i in items)
            images = {}
            if any(i.image_inputs is not None for i in items):  # image tokens look alike: never share prompts
                prompts, copies, rows = [i.prompt_ids for i in items], n, [range(k * n, (k + 1) * n)
                                                                           for k in range(len(items))]
                images = {"image_inputs": [i.image_inputs for i in items],
                          "images": [tuple(i.request.images) for i in items]}
            else:
                prompts, copies, rows = shared_prompts([i.prompt_ids for i in items], n, sample)
            started = time.monotonic()
            try:
                gen = generate(self.engine, prompts, copies, max_new_tokens=budget,
                               temperature=temperature, top_p=top_p, top_k=self.sampling.get("top_k", 0),
                               do_sample=sample, **images)
            except Exception as err:  # noqa: BLE001 - the engine failed these calls; the run decides on the episodes
                for item in items:
                    self._answer(item, 500, {"error": {"message": f"generation failed: {type(err).__name__}: {err}",
                                                       "type": "server_error", "param": None, "code": None}})
                continue
            self.generate_calls += 1
            self.last_generate_s = time.monotonic() - started
            off_policy = sample and (temperature != float(self.sampling.get("temperature", 1.0))
                                     or top_p != float(self.sampling.get("top_p", 1.0)))
            for item, item_rows in zip(items, rows):
                try:
                    made = [self._choice(item.request, gen, r) for r in item_rows]
                except Exception as err:  # noqa: BLE001 - a sampled row the gateway cannot answer: this call fails, not the run
                    self._answer(item, 500, {"error": {"message": f"the sampled turn could not be answered: "
                                                                  f"{type(err).__name__}: {err}", "type": "server_error",
                                                       "param": None, "code": None}})
                    continue
                self._finish(item, made, off_policy)

    def _choice(self, req: Request, gen, row: int) -> tuple[Choice, str | None]:
        from .sampled import choice_of

        limit = min(req.max_tokens or self.max_new_tokens, self.max_new_tokens)
        return choice_of(self.tokenizer, gen, row, limit=limit, eos=self.eos, stops=req.stop,
                         parser=self.parser if req.parse_tools else None, token_texts=req.logprobs)

    def _finish(self, item: _Pending, made: list[tuple[Choice, str | None]], off_policy: bool) -> None:
        req, episode = item.request, item.episode
        choices, ends = [c for c, _ in made], [e for _, e in made]
        with self.cond:
            if episode.closed:  # it ran out of time while its call was generated
                return self._answer(item, 410, {"error": {"message": "this episode is over", "type":
                                                          "invalid_request_error", "param": None, "code": None}})
            episode.record(item.prompt_ids, choices, [c.finish_reason != "length" for c in choices],
                           item.image_inputs)
            episode.off_policy_calls += int(off_policy)
            episode.tool_calls += len(choices[0].tool_calls or [])
            episode.last = Served(req.messages, req.tools, req.prompt, item.prompt_ids, choices, ends)
            first = choices[0]
            if req.chat:
                answer = {"role": "assistant", "content": first.content if first.content is not None else first.text}
                if first.tool_calls:
                    answer["tool_calls"] = first.tool_calls
                episode.transcript = [*req.messages, answer]
            else:
                episode.transcript = [{"role": "assistant", "content": first.text}]
        body = (chat_body if req.chat else completion_body)(req, item.prompt_ids, choices, MODEL_NAME)
        self._answer(item, 200, body)


def shared_prompts(prompt_ids: list[list[int]], n: int, sample: bool = True) -> tuple[list[list[int]], int, list[range]]:
    """``(prompts, copies, rows)``: the calls of a wave as one ``generate(prompts, copies)``, and the
    rows of its result that answer each call. Calls with the same prompt ids (a GRPO group's first
    calls) become one prompt sampled ``copies`` times, so the engine computes it once per group; that
    needs every distinct prompt to come equally often, else each call is its own prompt. Greedy
    decoding (``sample`` False) gives each of a call's ``n`` choices a row of its own prompt."""
    if not sample:
        return [ids for ids in prompt_ids for _ in range(n)], 1, [range(k * n, (k + 1) * n) for k in range(len(prompt_ids))]
    order: dict[tuple, list[int]] = {}
    for i, ids in enumerate(prompt_ids):
        order.setdefault(tuple(ids), []).append(i)
    counts = {len(v) for v in order.values()}
    if len(order) == len(prompt_ids) or len(counts) != 1:
        return prompt_ids, n, [range(k * n, (k + 1) * n) for k in range(len(prompt_ids))]
    copies = counts.pop() * n
    rows: list[range] = [range(0)] * len(prompt_ids)
    for d, calls in enumerate(order.values()):
        for j, i in enumerate(calls):
            rows[i] = range(d * copies + j * n, d * copies + (j + 1) * n)
    return [list(k) for k in order], copies, rows


def generate(engine, prompt_ids, n, **kwargs):
    """``engine.generate`` asking for the sampled tokens' log-probs where the engine can give them."""
    import inspect

    if "logprobs" in inspect.signature(engine.generate).parameters:
        kwargs["logprobs"] = True
    return engine.generate(prompt_ids, n, **kwargs)
