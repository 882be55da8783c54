"""Chat templates in a multi-turn rollout: the observation tokens after a sampled turn, and a probe.

Token in, token out: the policy's sampled tokens are kept as sampled, never decoded and
re-encoded. Only what comes *after* a turn (tool results, environment feedback, the next
generation prompt) is rendered by the chat template and tokenised. For a conversation
``history`` whose next assistant turn was sampled as ``assistant_text`` + an end token::

    base = render(history + [assistant], add_generation_prompt=False)
    full = render(history + [assistant] + new_messages, add_generation_prompt=True)
    observation = base[after the last end-of-turn text] + full[len(base):]

``base[after the last end text]`` is what the template writes after the end token (Qwen's ``\\n``
after ``<|im_end|>``; nothing for Llama's ``<|eot_id|>``). This is exact only when the template
renders earlier turns the same way once a turn is added (``full`` starts with ``base``, the prefix
property); a template that re-renders earlier turns (Qwen3 drops earlier turns' ``<think>``
blocks before the last *user* message) raises ``TemplateDriftError``. ``check_template`` probes
all of it once, before training, so a run fails at start-up rather than at its first tool call.
"""

from __future__ import annotations

from ..errors import ConfigError

__all__ = ["TemplateError", "TemplateDriftError", "render", "observation_ids", "observation_overhead",
           "check_observation_room", "check_template"]

CONTEXT_CHARS = 40
"""Characters shown on each side of the first difference in a drift error."""

PROBE_MARKER = "steadyrl-probe-7c1e"
"""A string no template writes by itself: the probes look for it in the rendering."""


class TemplateError(ConfigError):
    """The tokenizer's chat template cannot do what a multi-turn rollout needs."""


class TemplateDriftError(TemplateError):
    """Adding a turn changes how the template renders the earlier ones (no prefix property)."""


def _name(tokenizer) -> str:
    return getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__


def _require_template(tokenizer) -> None:
    if not getattr(tokenizer, "chat_template", None):
        raise TemplateError(
            f"multi-turn rollouts need a chat template, and the tokenizer {_name(tokenizer)!r} has none; "
            "use an instruct model's tokenizer or set tokenizer.chat_template to a Jinja template")


def render(tokenizer, messages: list[dict], *, tools: list[dict] | None, add_generation_prompt: bool,
           purpose: str = "a conversation", template_kwargs: dict | None = None) -> str:
    """``apply_chat_template(tokenize=False)``; any failure is a ``TemplateError`` naming ``purpose``.
    ``template_kwargs`` go to the template as variables (``enable_thinking``, ``date_string`` ...)."""
    _require_template(tokenizer)
    try:
        text = tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=add_generation_prompt, tokenize=False,
            **(template_kwargs or {}))
    except Exception as err:  # noqa: BLE001 - a template may raise anything (raise_exception, ...)
        raise TemplateError(f"the chat template of {_name(tokenizer)!r} failed to render {purpose}: "
                            f"{type(err).__name__}: {err}") from None
    if not isinstance(text, str):
        raise TemplateError(f"the chat template of {_name(tokenizer)!r} returned a {type(text).__name__} "
                            f"for {purpose}, expected text")
    return text


def _first_difference(a: str, b: str) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _drift_error(tokenizer, base: str, full: str, what: str) -> TemplateDriftError:
    i = _first_difference(base, full)
    lo, hi = max(0, i - CONTEXT_CHARS), i + CONTEXT_CHARS
    return TemplateDriftError(
        f"the chat template of {_name(tokenizer)!r} renders the conversation differently once {what} is "
        f"added (it is not a prefix of the longer rendering), so the observation tokens cannot be appended "
        f"to the sampled ones; first difference at character {i}: before {base[lo:hi]!r}, "
        f"after {full[lo:hi]!r}")


def _after_end(tokenizer, base: str, end_texts: list[str]) -> str:
    """The part of ``base`` after the last occurrence of any of ``end_texts``."""
    ends = [base.rfind(t) + len(t) for t in end_texts if t and base.rfind(t) != -1]
    if not ends:
        raise TemplateError(
            f"the chat template of {_name(tokenizer)!r} does not close an assistant turn with any of the "
            f"end-of-turn texts {end_texts} (the tokens that stop generation); rendered turn ends with "
            f"{base[-CONTEXT_CHARS:]!r}")
    return base[max(ends):]


def _suffix(tokenizer, history, assistant_text, new_messages, tools, end_texts, what, kwargs) -> str:
    turns = list(history) + [{"role": "assistant", "content": assistant_text}]
    for _ in range(2):  # a second try: a date header may change between the two renders
        base = render(tokenizer, turns, tools=tools, add_generation_prompt=False,
                      purpose="the conversation up to the sampled turn", template_kwargs=kwargs)
        full = render(tokenizer, turns + list(new_messages), tools=tools, add_generation_prompt=True,
                      purpose=f"the conversation with {what}", template_kwargs=kwargs)
        if full.startswith(base):
            return _after_end(tokenizer, base, end_texts) + full[len(base):]
    raise _drift_error(tokenizer, base, full, what)


def _describe(new_messages: list[dict]) -> str:
    roles = sorted({str(m.get("role")) for m in new_messages})
    return f"the next {'/'.join(roles) or 'generation prompt'} message(s)"


def observation_ids(tokenizer, history: list[dict], assistant_text: str, new_messages: list[dict], *,
                    tools: list[dict] | None, end_texts: list[str],
                    template_kwargs: dict | None = None) -> list[int]:
    """The token ids to append after a sampled turn (ended by one of ``end_texts``) so that the
    conversation goes on with ``new_messages`` and a fresh generation prompt (see the module docstring)."""
    text = _suffix(tokenizer, history, assistant_text, new_messages, tools, end_texts,
                   _describe(new_messages), template_kwargs)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def observation_overhead(tokenizer, *, tools: list[dict] | None, observation_role: str, end_texts: list[str],
                         template_kwargs: dict | None = None) -> int:
    """The tokens the template writes for one ``observation_role`` message with empty content after a
    turn (its header, its end, the next generation prompt; for ``tool`` messages, the most over the
    tools' names): what ``rollout.max_observation_tokens`` must exceed for any content to fit."""
    history = [{"role": "user", "content": "What is 2 + 3?"}]
    turn = _probe_turns(tokenizer, history, tools, template_kwargs)[0]
    names = (_tool_names(tools) if tools and observation_role == "tool" else []) or [None]

    def one(name: str | None) -> int:
        message = {"role": observation_role, "content": "", **({"name": name} if name else {})}
        return len(observation_ids(tokenizer, history, turn, [message], tools=tools,
                                   end_texts=end_texts, template_kwargs=template_kwargs))

    return max(one(name) for name in names)


def check_observation_room(tokenizer, limit: int, *, tools: list[dict] | None, observation_role: str,
                           end_texts: list[str], template_kwargs: dict | None = None) -> None:
    """``rollout.max_observation_tokens`` (``limit``) must leave room for content after the
    template's own tokens (:func:`observation_overhead`): an observation is shortened by its content
    only, never by cutting the template's tokens. Raises ``ConfigError``."""
    overhead = observation_overhead(tokenizer, tools=tools, observation_role=observation_role,
                                    end_texts=end_texts, template_kwargs=template_kwargs)
    if limit <= overhead:
        raise ConfigError(
            f"rollout.max_observation_tokens = {limit}: the chat template of {_name(tokenizer)!r} alone needs "
            f"{overhead} tokens to wrap one empty {observation_role!r} message and the next generation prompt, "
            f"so no content would fit; set it to at least {overhead + 1}")


def _tool_names(tools: list[dict]) -> list[str]:
    return [t.get("function", t).get("name", "") for t in tools]


def _check_renders(tokenizer, *, tools, observation_role: str, kwargs) -> None:
    """The template shows the tools (when given) and renders ``observation_role`` messages."""
    user = [{"role": "user", "content": "What is 2 + 3?"}]
    if tools:
        prompt = render(tokenizer, user, tools=tools, add_generation_prompt=True, purpose="a prompt with tools",
                        template_kwargs=kwargs)
        hidden = [n for n in _tool_names(tools) if n not in prompt]
        if hidden:
            raise TemplateError(
                f"the chat template of {_name(tokenizer)!r} ignores tools=: the rendered prompt does not "
                f"mention tool(s) {hidden}, so the model would never see them; use a model whose template "
                "supports tools (Qwen2.5, Qwen3, Llama-3.1, Hermes ...) or set tokenizer.chat_template")
    messages = user + [{"role": "assistant", "content": "Let me check."},
                       {"role": observation_role, "content": PROBE_MARKER}]
    text = render(tokenizer, messages, tools=tools, add_generation_prompt=True,
                  purpose=f"a {observation_role!r} message", template_kwargs=kwargs)
    if PROBE_MARKER not in text:
        raise TemplateError(
            f"the chat template of {_name(tokenizer)!r} cannot render {observation_role} messages (their "
            f"content does not appear in the rendering), so the model would never see the observations; "
            f"use a template that renders role {observation_role!r}")


def _drift_probe(tokenizer, *, tools, observation_role: str, end_texts: list[str], kwargs) -> None:
    """The prefix property over two turns whose assistant messages hold reasoning."""
    obs = [{"role": observation_role, "content": f"{PROBE_MARKER}-1"}]
    history = [{"role": "user", "content": "What is 2 + 3?"}]
    for turn in _probe_turns(tokenizer, history, tools, kwargs):
        try:
            _suffix(tokenizer, history, turn, obs, tools, end_texts, f"a {observation_role!r} observation", kwargs)
        except TemplateDriftError as err:
            dropped = " (drops their <think> blocks)" if _drops_think(tokenizer, history, turn, obs, tools,
                                                                      kwargs) else ""
            fix = ("give observations the 'tool' role, or use a template that keeps earlier turns"
                   if observation_role != "tool" else
                   "use a template that keeps earlier turns (with Qwen3: keep thinking on)")
            raise TemplateDriftError(
                f"the chat template of {_name(tokenizer)!r} re-renders earlier assistant turns once a turn is "
                f"added{dropped} when observations have role {observation_role!r}; token-in/token-out "
                f"training needs each turn rendered once and kept: {fix}. {err}") from None
        history = history + [{"role": "assistant", "content": turn}] + obs


def _probe_turns(tokenizer, history, tools, kwargs) -> list[str]:
    """Two assistant turns as the model would write them: with reasoning, unless the generation
    prompt already closes an empty ``<think>`` block (thinking switched off)."""
    if "</think>" in _generation_prompt(tokenizer, history, tools, kwargs):
        return ["a1", "a2"]
    return ["<think>\nr1\n</think>\n\na1", "<think>\nr2\n</think>\n\na2"]


def _generation_prompt(tokenizer, history, tools, kwargs) -> str:
    """What ``add_generation_prompt=True`` adds after ``history`` (Qwen3 with ``enable_thinking=False``:
    an empty ``<think>`` block)."""
    with_prompt = render(tokenizer, history, tools=tools, add_generation_prompt=True, template_kwargs=kwargs)
    without = render(tokenizer, history, tools=tools, add_generation_prompt=False, template_kwargs=kwargs)
    return with_prompt[len(without):] if with_prompt.startswith(without) else with_prompt


def _drops_think(tokenizer, history, turn, obs, tools, kwargs) -> bool:
    turns = history + [{"role": "assistant", "content": turn}]
    full = render(tokenizer, turns + obs, tools=tools, add_generation_prompt=False, template_kwargs=kwargs)
    before = render(tokenizer, turns, tools=tools, add_generation_prompt=False, template_kwargs=kwargs)
    return before.count("<think>") > full.count("<think>")


def check_template(tokenizer, *, tools: list[dict] | None, observation_role: str, end_texts: list[str],
                   template_kwargs: dict | None = None) -> None:
    """Probe, before training, that the chat template supports a multi-turn rollout: it exists, shows
    the tools, renders ``observation_role`` messages, and keeps earlier turns as rendered (the prefix
    property ``observation_ids`` relies on). Raises ``TemplateError`` / ``TemplateDriftError``."""
    _require_template(tokenizer)
    _check_renders(tokenizer, tools=tools, observation_role=observation_role, kwargs=template_kwargs)
    _drift_probe(tokenizer, tools=tools, observation_role=observation_role, end_texts=end_texts,
                 kwargs=template_kwargs)
