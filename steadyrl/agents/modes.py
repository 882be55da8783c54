"""The start-up probe of ``rollout.multi_turn.mode`` ``stepwise`` and ``as_sampled``, and ``auto``'s choice.

A template that re-renders earlier turns (thinking templates drop their reasoning; Hermes re-renders
a tool result once a turn follows) cannot be trained as one sequence that is its rendering
(:mod:`.probe`), but it can be trained step-wise (each turn's context rendered afresh) or as sampled
(the observations taken from the end of the rendering). :func:`check_mode` plays the probe's
scripted episode in the mode asked: what the model writes each turn (:func:`model_turn`, also for a
template whose generation prompt opens a block its rendered turns lack), the observations as the
rollout renders them in that mode, and each step-wise context; any failure refuses the run, naming
``rollout.multi_turn.mode`` and the modes that would work. ``auto`` is ``single`` when the template
is append-only, else ``stepwise``.
"""

from __future__ import annotations

from .messages import id_style, renders_tool_calls
from .probe import MODE_WORDS, alternatives, diagnose, play, sampled_turn
from .templating import (CONTEXT_CHARS, TemplateDriftError, TemplateError, check_renders, check_stops, find_closer,
                         first_difference, kept_message, render, rendered_tail, require_template, role_closer, scripted_turns,
                         template_name, thinks)
from .turns import call_form, served, shape_turn, turn_renders


def _boundary(text: str, i: int) -> int:
    """The start of the tag or line ``text[i]`` falls in (a difference inside ``<think>`` vs ``<tool_call>``)."""
    return max(text.rfind("\n", 0, i), text.rfind(">", 0, i)) + 1


def model_turn(tokenizer, history, message, new, *, tools, end_texts, kwargs, think: bool, i: int = 0):
    """``(text, end)`` as :func:`sampled_turn`, also for a template whose generation prompt starts a
    turn unlike its rendering of the turn (QwQ and DeepSeek-R1 open ``<think>`` there, and render the
    turn without it): the model writes after the generation prompt what the rendered turn holds past
    their common start, its reasoning first. A template that renders a call turn only once a message
    follows it (Nemotron-Nano-v2 splits a last turn's text and calls in two turns) is read there."""
    names = [c["function"]["name"] for c in message.get("tool_calls") or []]
    try:
        found = sampled_turn(tokenizer, history, message, new, tools=tools, end_texts=end_texts, kwargs=kwargs,
                             think=think, i=i)
    except TemplateDriftError:
        found = _turn_in(tokenizer, history, message, new, [], tools=tools, end_texts=end_texts, kwargs=kwargs,
                         think=think, i=i)
    if names and new and not all(n in found[0] for n in names):
        try:
            followed = _turn_in(tokenizer, history, message, new, new, tools=tools, end_texts=end_texts,
                                kwargs=kwargs, think=think, i=i)
        except TemplateError:
            return found
        found = followed if all(n in followed[0] for n in names) else found
    return found


def _turn_in(tokenizer, history, message, new, after, *, tools, end_texts, kwargs, think: bool, i: int):
    """What the model writes for ``message`` (``new``: what follows it) read off the rendering of
    ``history + [message] + after`` (``after``: nothing, or ``new``, where the turn must be closed)."""
    plain = render(tokenizer, history, tools=tools, add_generation_prompt=False, template_kwargs=kwargs)
    head = render(tokenizer, history, tools=tools, add_generation_prompt=True, template_kwargs=kwargs)
    base = render(tokenizer, history + [message] + list(after), tools=tools, add_generation_prompt=False,
                  template_kwargs=kwargs)
    if not head.startswith(plain):
        raise TemplateError(f"the chat template of {template_name(tokenizer)!r} renders the conversation so far "
                            f"differently when a generation prompt follows it")
    prompt = head[len(plain):]
    at = next((base.rfind(prompt[:n]) for n in range(len(prompt), 0, -1) if base.rfind(prompt[:n]) > 0), -1)
    if prompt and base.startswith(plain):
        turn = base[len(plain):]
    elif at > 0:  # the turn before renders differently once a turn follows (Hermes' tool results): find the turn
        turn = base[at:]
    else:  # a template that writes the generation prompt whatever it is asked (Command-R7B)
        at = _boundary(head, first_difference(head, base))
        prompt, turn = head[at:], base[at:]
    start = _boundary(prompt, first_difference(prompt, turn))  # not inside a tag: <think> / <tool_call>
    closed = find_closer(turn, start, end_texts)
    found = closed or (None if after else role_closer(tokenizer, history, message, new, tools, end_texts, kwargs))
    if found is None:
        raise TemplateError(
            f"the chat template of {template_name(tokenizer)!r} does not close an assistant turn with any of "
            f"the tokens "
            f"that stop generation {end_texts}; add the closing token's id to eos_token_id in the model's "
            f"generation_config.json")
    stop, end = found
    text = turn[start: stop - len(end)] if closed else turn[start:]  # no closer: the next role token ends it
    if think:
        text = (f"\nr{i}\n</think>\n\n" if head.rstrip().endswith("<think>") else f"<think>\nr{i}\n</think>\n\n") + text
    return text, end


def play_mode(tokenizer, mode: str, *, tools, observation_role: str, end_texts: list[str], kwargs=None,
              parser=None, strict: bool = True) -> list[str]:
    """The scripted episode of :func:`play` in ``stepwise`` or ``as_sampled`` mode: what the model
    writes each turn, the observations rendered as the rollout renders them in that mode (after the
    turn's end token, whatever the template does to earlier turns), and in step-wise mode each
    turn's context rendered. Returns the turn contexts' texts; raises ``TemplateError`` where the
    rollout would."""
    history = [{"role": "user", "content": "What is 2 + 3 + 4?"}]
    head = render(tokenizer, history, tools=tools, add_generation_prompt=True, template_kwargs=kwargs)
    think, style = thinks(tokenizer, head[-CONTEXT_CHARS:]), id_style(tokenizer.chat_template)
    contexts, text, calls = [head], head, 0
    # as sampled, a template that renders no call at all (only content: LFM2's, Falcon-H1's) keeps the
    # call the model writes as its content (messages.renders_tool_calls) and never renders the turn
    # again: no call can be written where the model did not write it, so there is none to look for
    shows_calls = mode != "as_sampled" or not (observation_role == "tool" and tools) or renders_tool_calls(
        tokenizer, tools, kwargs)
    for i, (message, new) in enumerate(scripted_turns(tokenizer, tools, observation_role, style)):
        message = call_form(tokenizer, history, message, tools=tools, template_kwargs=kwargs)
        sampled, end = model_turn(tokenizer, history, message, new, tools=tools, end_texts=end_texts, kwargs=kwargs,
                                  think=think, i=i)
        assistant = shape_turn(tokenizer, history, sampled, kept_message(
            message, sampled, parser if observation_role == "tool" and tools else None, style, calls, strict,
            tokenizer.chat_template), tools=tools, template_kwargs=kwargs, end=end)
        names = [c["function"]["name"] for c in message.get("tool_calls") or []] if shows_calls else []
        if names and not all(n in sampled for n in names) and (not sampled.split("</think>")[-1].strip() or all(n in render(
                tokenizer, history + [message], tools=tools, add_generation_prompt=False, template_kwargs=kwargs
        ).split(history[-1].get("content") or "\0")[-1] for n in names)):
            raise TemplateError(
                f"the chat template of {template_name(tokenizer)!r} writes a call outside the assistant turn the model "
                f"samples, or none (the turn after its generation prompt is {sampled!r}): no turn the model writes "
                f"is the call the template shows it")
        if mode == "stepwise" and new and not served(tokenizer, history, sampled, assistant, tools, kwargs) \
                and not turn_renders(tokenizer, history, sampled, assistant, tools=tools,
                                                           template_kwargs=kwargs, end=end):
            raise TemplateError(
                f"the chat template of {template_name(tokenizer)!r} does not render the turn the model wrote "
                f"({sampled!r}) "
                f"from any reading of it as reasoning_content, content and tool_calls ({assistant}): the next "
                f"turns' contexts would hold a turn the model did not write")
        calls += len(message.get("tool_calls") or [])
        if not new:
            break
        text += sampled + end + rendered_tail(tokenizer, history, assistant, new, tools, end_texts, kwargs, end)
        history = history + [assistant] + new
        contexts.append(render(tokenizer, history, tools=tools, add_generation_prompt=True, template_kwargs=kwargs)
                        if mode == "stepwise" else text)
    return contexts


def mode_works(tokenizer, mode: str, **kw) -> bool:
    """Whether ``mode`` (stepwise, as_sampled) can run the scripted episode with this template."""
    try:
        check_renders(tokenizer, tools=kw["tools"], observation_role=kw["observation_role"], kwargs=kw["kwargs"])
        play_mode(tokenizer, mode, tools=kw["tools"], observation_role=kw["observation_role"],
                  end_texts=kw["end_texts"], kwargs=kw["kwargs"], parser=kw.get("parser"), strict=False)
        return True
    except TemplateError:
        return False


def check_mode(tokenizer, mode: str, *, tools: list[dict] | None, observation_role: str, end_texts: list[str],
               template_kwargs: dict | None = None, parser=None) -> str:
    """Probe ``rollout.multi_turn.mode`` = ``mode`` with this template; returns the mode to run
    (``auto``: ``single`` when the template renders an episode as one sequence, else ``stepwise``).
    Raises ``TemplateError`` naming the key and the modes that would work."""
    if mode == "single":
        check_template(tokenizer, tools=tools, observation_role=observation_role, end_texts=end_texts,
                       template_kwargs=template_kwargs, parser=parser)
        return "single"
    if mode == "auto":
        try:
            check_template(tokenizer, tools=tools, observation_role=observation_role, end_texts=end_texts,
                           template_kwargs=template_kwargs, parser=parser)
            return "single"
        except TemplateDriftError as err:
            if "rollout.multi_turn.mode: stepwise" not in str(err):
                raise
            mode = "stepwise"
    require_template(tokenizer)
    check_stops(tokenizer, end_texts)
    if parser is None:
        from .formats import parser_for_template
        from .parsers import TOOL_PARSERS

        parser, strict = TOOL_PARSERS[parser_for_template(tokenizer.chat_template)], False
    else:
        strict = True
    try:
        check_renders(tokenizer, tools=tools, observation_role=observation_role, kwargs=template_kwargs)
        play_mode(tokenizer, mode, tools=tools, observation_role=observation_role, end_texts=end_texts,
                  kwargs=template_kwargs, parser=parser, strict=strict)
    except TemplateError as err:
        others = [MODE_WORDS[m] for m in ("stepwise", "as_sampled") if m != mode and mode_works(
            tokenizer, m, tools=tools, observation_role=observation_role, end_texts=end_texts,
            kwargs=template_kwargs, parser=parser)]
        raise TemplateError(f"rollout.multi_turn.mode = {mode!r} cannot run with this chat template: {err}"
                            + (f". What would handle it: {'; '.join(others)}" if others else "")) from None
    return mode


def check_template(tokenizer, *, tools: list[dict] | None, observation_role: str, end_texts: list[str],
                   template_kwargs: dict | None = None, parser=None) -> None:
    """Probe, before training, that a multi-turn rollout with this template is exact (module
    docstring). Raises ``TemplateError``, or ``TemplateDriftError`` naming what the template does
    and the settings that would handle it."""
    require_template(tokenizer)
    check_stops(tokenizer, end_texts)
    kwargs = template_kwargs
    strict = parser is not None
    if parser is None:  # the parser of the template's own format (what tool_parser: auto reads)
        from .formats import parser_for_template
        from .parsers import TOOL_PARSERS

        parser = TOOL_PARSERS[parser_for_template(tokenizer.chat_template)]
    check_renders(tokenizer, tools=tools, observation_role=observation_role, kwargs=kwargs)
    try:
        text, whole = play(tokenizer, tools=tools, observation_role=observation_role, end_texts=end_texts,
                           kwargs=kwargs, parser=parser, strict=strict)
        problem = None if whole.startswith(text) else diagnose(text, whole)
    except TemplateDriftError as err:
        problem = str(err)
    if problem is None:
        return
    fixes = alternatives(tokenizer, tools=tools, observation_role=observation_role, end_texts=end_texts,
                          kwargs=kwargs)
    modes = [MODE_WORDS[m] for m in ("stepwise", "as_sampled") if mode_works(
        tokenizer, m, tools=tools, observation_role=observation_role, end_texts=end_texts, kwargs=kwargs,
        parser=parser)]
    fix = "; ".join(fixes + modes) or "none found (no multi-turn mode renders this conversation)"
    raise TemplateDriftError(
        f"the chat template of {template_name(tokenizer)!r}, with observations of role {observation_role!r}"
        f"{' and tools' if tools else ''}{f' and {kwargs}' if kwargs else ''}, cannot be trained token in / "
        f"token out: {problem}. What would handle it: {fix}")
