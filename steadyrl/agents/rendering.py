"""Rendering a conversation with a tokenizer's chat template, and the errors of a template that
cannot do what a multi-turn rollout needs: the bottom of the chat-template modules (:mod:`.messages`,
:mod:`.turns` and :mod:`.templating` build on it, so that none of them imports another for these).
"""

from __future__ import annotations

from ..errors import ConfigError

__all__ = ["HISTORY_CLOSERS", "TemplateError", "TemplateDriftError", "template_name", "require_template", "render"]


HISTORY_CLOSERS = {"<|return|>": "<|end|>"}
"""Stop tokens a template writes differently once the turn is history (Harmony: a final answer ends
with ``<|return|>`` when sampled, ``<|end|>`` in the conversation): the observation of the as-sampled
and step-wise modes follows either."""


class TemplateError(ConfigError):
    """The tokenizer's chat template cannot do what a multi-turn rollout needs."""


class TemplateDriftError(TemplateError):
    """Adding a turn changes how the template renders the earlier ones (no prefix property)."""


def template_name(tokenizer) -> str:
    return getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__


def require_template(tokenizer) -> None:
    if not getattr(tokenizer, "chat_template", None):
        raise TemplateError(
            f"multi-turn rollouts need a chat template, and the tokenizer {template_name(tokenizer)!r} has none; "
            "use an instruct model's tokenizer or set tokenizer.chat_template to a Jinja template")


def render(tokenizer, messages: list[dict], *, tools: list[dict] | None, add_generation_prompt: bool,
           purpose: str = "a conversation", template_kwargs: dict | None = None) -> str:
    """``apply_chat_template(tokenize=False)``; any failure is a ``TemplateError`` naming ``purpose``.
    ``template_kwargs`` go to the template as variables (``enable_thinking``, ``date_string`` ...)."""
    require_template(tokenizer)
    try:
        text = tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=add_generation_prompt, tokenize=False,
            **(template_kwargs or {}))
    except Exception as err:  # noqa: BLE001 - a template may raise anything (raise_exception, ...)
        raise TemplateError(f"the chat template of {template_name(tokenizer)!r} failed to render {purpose}: "
                            f"{type(err).__name__}: {err}") from None
    if not isinstance(text, str):
        raise TemplateError(f"the chat template of {template_name(tokenizer)!r} returned a {type(text).__name__} "
                            f"for {purpose}, expected text")
    return text
