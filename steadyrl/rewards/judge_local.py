"""``llm_judge`` with ``backend: local``: a causal LM on the trainer's device judges the samples.

The judge's messages (see :mod:`steadyrl.rewards.judge`) go through the judge tokenizer's chat
template with the generation prompt (or, without a template, the message texts joined by blank
lines); ``batch_size`` of them are generated at a time, greedily (``do_sample=False``), up to
``max_new_tokens`` new tokens, left-padded as in :mod:`steadyrl.rollout.hf`. The model is loaded
on the first call in the process that scores (``isolation: inline`` by default), frozen, in eval
mode, under ``torch.no_grad``; its ``config.json`` is read when the reward is built, so a wrong
path stops the run before any weights load.
"""

from __future__ import annotations

import torch

from ..errors import ConfigError
from .http_client import RequestFailed
from .judge_base import JudgeBase, Judging
from .params import Caching, LocalModel
from .reward_model import DeviceReward, load_model_config

__all__ = ["LocalJudge"]


class LocalJudge(JudgeBase, DeviceReward):
    """The local backend of ``llm_judge`` (module docstring)."""

    def __init__(self, judging: Judging, model: LocalModel, caching: Caching, *, batch_size: int):
        """``batch_size``: judge prompts per ``generate``."""
        DeviceReward.__init__(self, "llm_judge", model, caching)
        self.setup_judge(judging, caching.answer_key)
        self.batch_size = batch_size
        config = load_model_config("llm_judge", model.source, model.revision, False)
        archs = list(getattr(config, "architectures", None) or [])
        if archs and not any(a.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")) for a in archs):
            raise ConfigError(f"llm_judge reward: option model={model.source!r} is not a causal language model "
                              f"(its config.json names architectures {archs})")
        self.tokenizer = None

    def load(self):
        from ..models import load_policy, load_tokenizer

        self.tokenizer = load_tokenizer(self.source, revision=self.revision, field="llm_judge reward: option model")
        return load_policy(self.source, dtype=self.dtype, device=self.device, revision=self.revision,
                           field="llm_judge reward: option model")

    def _render(self, messages: list[dict]) -> tuple[str, bool]:
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            return tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False), True
        return "\n\n".join(m["content"] for m in messages) + "\n\n", False

    def _generate(self, model, texts: list[str], templated: list[bool]) -> list[str]:
        from transformers import GenerationConfig

        ids = [self.tokenizer(t, add_special_tokens=not tp)["input_ids"] for t, tp in zip(texts, templated)]
        batch = self.tokenizer.pad({"input_ids": ids}, padding=True, return_tensors="pt")
        config = GenerationConfig(do_sample=False, max_new_tokens=self.judging.max_new_tokens,
                                  pad_token_id=self.tokenizer.pad_token_id, eos_token_id=self.tokenizer.eos_token_id)
        with torch.no_grad():
            out = model.generate(input_ids=batch["input_ids"].to(self.device),
                                 attention_mask=batch["attention_mask"].to(self.device), generation_config=config)
        return self.tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:].cpu(), skip_special_tokens=True)

    def _ask(self, questions: list[list[dict]]) -> list[str]:
        """Rubric mode: the judge's reply to each question, ``batch_size`` at a time."""
        model = self.loaded()
        rendered = [self._render(q) for q in questions]
        replies: list[str] = []
        for start in range(0, len(rendered), self.batch_size):
            chunk = rendered[start:start + self.batch_size]
            replies.extend(self._generate(model, [t for t, _ in chunk], [tp for _, tp in chunk]))
        return replies

    def score_new(self, prompts: list, completions: list, columns: dict) -> list:
        if self.rubric is not None:
            return self.score_rubric(prompts, completions, columns, self._ask)
        model = self.loaded()
        answers = columns.get(self.answer_key) or [None] * len(completions)
        scores: list = [None] * len(completions)
        rows, texts, templated = [], [], []
        for i, (p, c, a) in enumerate(zip(prompts, completions, answers)):
            try:
                text, tp = self._render(self.messages(p, c, a))
            except RequestFailed as err:
                self.count_failure(err.reason)
                continue
            rows.append(i), texts.append(text), templated.append(tp)
        for start in range(0, len(rows), self.batch_size):
            chunk = slice(start, start + self.batch_size)
            for i, reply in zip(rows[chunk], self._generate(model, texts[chunk], templated[chunk])):
                try:
                    scores[i] = self.parser.parse(reply)
                except RequestFailed as err:
                    self.count_failure(err.reason)
        return scores
