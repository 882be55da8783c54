"""The ``reward_model`` built-in: a sequence classifier (``AutoModelForSequenceClassification``)
scores prompt + completion.

For sample ``i`` the text is the reward model's chat template applied to
``[user: prompt_i, assistant: completion_i]`` (a prompt that is already a message list is used as
it is), or ``prompt_i + completion_i`` when its tokenizer has no template or ``chat_template`` is
off; it is tokenized (cut from the left to ``max_length`` tokens - by default the model's
``max_position_embeddings`` - so the completion's end is kept)
and scored in batches of ``batch_size``::

    r_i = logits_i[label_index]                      (label_index 0 for a one-logit head)
    normalize = batch:  r_i <- (r_i - mean_B(r)) / (std_B(r) + 1e-6)   (population std, this batch)
    normalize = fixed:  r_i <- (r_i - mean) / std                      (given numbers)

The model is loaded once, on the first call, in the process that scores (so in the trainer with
the default ``isolation: inline``), on the trainer's device and dtype unless the options say
otherwise; frozen (``requires_grad_(False)``), in eval mode, and run under ``torch.no_grad``.

Everything that can be checked without the weights is checked when the reward is built: the
options, and that the model's ``config.json`` names a ``...ForSequenceClassification``
architecture (a base or causal LM would get a randomly initialised head: random rewards).
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..functional.constants import NORM_EPS
from .cached import CachedReward
from .params import Caching, LocalModel
from .registry import register_reward

if TYPE_CHECKING:  # torch is imported where it is used: reading a config stays torch-free
    import torch

__all__ = ["RewardModel", "DeviceReward", "TextScoring", "Normalization", "reward_model"]


def message_text(item) -> str:
    """A completion as text: TRL passes ``[{"role": "assistant", "content": text}]`` for chat data."""
    if isinstance(item, list):
        return "".join(str(m.get("content", "")) for m in item if isinstance(m, dict))
    return str(item)


class DeviceReward(CachedReward):
    """A :class:`CachedReward` that runs a model on a device: ``device`` / ``dtype`` ``"auto"``
    follow the trainer (:meth:`use_device`, called by the trainer when it builds the rewards), or
    CUDA when available and its default dtype when used on its own. Scored inline by default: an
    abandoned model call would keep the GPU busy and its memory held, and a forked worker cannot
    use CUDA."""

    preferred_isolation = "inline"

    def __init__(self, name: str, model: LocalModel, caching: Caching):
        import torch

        super().__init__(name, cache_size=caching.size, answer_key=caching.answer_key)
        device = model.device
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"{name} reward: option device={device!r} but no CUDA device is available; use 'auto' "
                              "(the trainer's device) or 'cpu'")
        self.source, self.revision, self.trust_remote_code = model.source, model.revision, model.trust_remote_code
        self._device_option, self._dtype_option = device, model.dtype
        self._trainer: tuple[torch.device, torch.dtype] | None = None
        self._pid = os.getpid()
        self._load_lock = threading.Lock()
        self.model = None

    def use_device(self, device: torch.device, dtype: torch.dtype) -> None:
        """Run on the trainer's ``device`` / ``dtype`` where the options say ``auto``."""
        import torch

        self._trainer = (torch.device(device), dtype)

    @property
    def device(self) -> torch.device:
        import torch

        if self._device_option != "auto":
            return torch.device(self._device_option)
        if self._trainer is not None:
            return self._trainer[0]
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")

    @property
    def dtype(self) -> torch.dtype:
        from ..models import resolve_dtype

        if self._dtype_option == "auto" and self._trainer is not None and self._device_option == "auto":
            return self._trainer[1]
        return resolve_dtype(self._dtype_option, self.device)

    def check_process(self) -> None:
        if self.device.type == "cuda" and os.getpid() != self._pid:
            raise RuntimeError(f"{self.__name__}: runs on {self.device} but was called in a forked worker process, "
                               "which cannot use CUDA; use isolation: inline (its default) or thread")

    def loaded(self):
        """The model, loaded on first use (``load()``), frozen and in eval mode."""
        with self._load_lock:
            if self.model is None:
                self.check_process()
                model = self.load()
                self.model = model.eval().requires_grad_(False)
        return self.model

    def load(self):
        raise NotImplementedError


def load_model_config(reward: str, model: str, revision, trust_remote_code: bool):
    from ..models import check_model_source
    from transformers import AutoConfig

    check_model_source(f"{reward} reward: option model", model)
    try:
        return AutoConfig.from_pretrained(model, revision=revision, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"{reward} reward: option model={model!r} could not be read: {first} (a local "
                          "directory written by save_pretrained, or a hub name that is cached or reachable)") from None


@dataclass(frozen=True)
class TextScoring:
    """How the reward model reads the samples: ``batch_size`` texts per forward pass, each cut from the
    left to ``max_length`` tokens (None: the model's ``max_position_embeddings``), made with the model's
    chat template when ``chat_template`` (and it has one), and the logit ``label_index`` read (None: the
    only one)."""

    batch_size: int
    max_length: int | None
    chat_template: bool
    label_index: int | None


@dataclass(frozen=True)
class Normalization:
    """What is done to a batch's scores (module docstring)::

        none:   r_i
        batch:  (r_i - mean_B(r)) / (std_B(r) + NORM_EPS)      (population std over the finite scores)
        fixed:  (r_i - mean) / std
    """

    mode: str
    mean: float | None = None
    std: float | None = None

    def apply(self, scores: list) -> list:
        if self.mode == "fixed":
            return [None if s is None else (s - self.mean) / self.std for s in scores]
        if self.mode == "batch":
            values = [s for s in scores if s is not None and math.isfinite(s)]
            if not values:
                return scores
            mu = math.fsum(values) / len(values)
            sd = math.sqrt(math.fsum((v - mu) ** 2 for v in values) / len(values))
            return [None if s is None else (s - mu) / (sd + NORM_EPS) for s in scores]
        return scores


class RewardModel(DeviceReward):
    """The ``reward_model`` reward (see the module docstring)."""

    def __init__(self, model: LocalModel, scoring: TextScoring, normalization: Normalization, caching: Caching):
        super().__init__("reward_model", model, caching)
        # types, ranges and normalize with mean / std: steadyrl.config.reward_options.RewardModelOptions
        self.scoring, self.normalization = scoring, normalization
        self.batch_size, self.chat_template = scoring.batch_size, scoring.chat_template
        self.max_length = scoring.max_length  # None: the model's positions, read when it loads
        config = load_model_config("reward_model", model.source, model.revision, model.trust_remote_code)
        self.label_index = _label_index(model.source, config, scoring.label_index)
        self.tokenizer = None

    def load(self):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(self.source, revision=self.revision,
                                            trust_remote_code=self.trust_remote_code)
        tok.padding_side, tok.truncation_side = "right", "left"
        if tok.pad_token_id is None:
            if tok.eos_token_id is None:
                raise ConfigError(f"reward_model reward: the tokenizer of {self.source!r} has neither a pad nor "
                                  "an EOS token")
            tok.pad_token = tok.eos_token
        model = AutoModelForSequenceClassification.from_pretrained(
            self.source, revision=self.revision, dtype=self.dtype, trust_remote_code=self.trust_remote_code)
        if model.config.pad_token_id is None:  # it finds each row's last token by the pad id
            model.config.pad_token_id = tok.pad_token_id
        if self.max_length is None:  # a text longer than the positions would fail the whole batch
            self.max_length = getattr(model.config, "max_position_embeddings", None)
        self.tokenizer = tok
        return model.to(self.device)

    def texts(self, prompts: list, completions: list) -> tuple[list[str], bool]:
        """The texts to score, and whether the chat template made them (then it added any BOS)."""
        tok = self.tokenizer
        templated = self.chat_template and getattr(tok, "chat_template", None) is not None
        out = []
        for prompt, completion in zip(prompts, completions):
            answer = message_text(completion)
            if templated:
                head = list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
                out.append(tok.apply_chat_template(head + [{"role": "assistant", "content": answer}], tokenize=False))
            else:
                head = prompt if not isinstance(prompt, list) else "\n\n".join(message_text([m]) for m in prompt)
                out.append(str(head) + answer)
        return out, templated

    def score_new(self, prompts: list, completions: list, columns: dict) -> list:
        import torch

        model = self.loaded()
        texts, templated = self.texts(prompts, completions)
        scores: list = []
        with torch.no_grad():
            for start in range(0, len(texts), self.batch_size):
                enc = self.tokenizer(texts[start:start + self.batch_size], return_tensors="pt", padding=True,
                                     truncation=self.max_length is not None, max_length=self.max_length,
                                     add_special_tokens=not templated)
                enc = {k: v.to(self.device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
                logits = model(**enc).logits
                scores.extend(logits[:, self.label_index].float().tolist())
        return scores

    def finish(self, scores: list) -> list:
        return self.normalization.apply(scores)


def _label_index(source: str, config, label_index: int | None) -> int:
    """The logit that is the reward, checked against the model's ``config.json`` (a sequence
    classifier with that many logits)."""
    archs = list(getattr(config, "architectures", None) or [])
    if not any(a.endswith("ForSequenceClassification") for a in archs):
        raise ConfigError(f"reward_model reward: option model={source!r} is not a sequence classifier (its "
                          f"config.json names architectures {archs}); a reward model is saved as "
                          "...ForSequenceClassification (e.g. LlamaForSequenceClassification)")
    labels = int(getattr(config, "num_labels", 1))
    if label_index is None and labels > 1:
        raise ConfigError(f"reward_model reward: the model has {labels} logits; set the option label_index "
                          f"to the one that is the reward (0..{labels - 1})")
    index = 0 if label_index is None else label_index
    if index >= labels:
        raise ConfigError(f"reward_model reward: option label_index={index} is out of range for a model with "
                          f"{labels} logit(s) (0..{labels - 1})")
    return index


@register_reward("reward_model")
def reward_model(**options) -> RewardModel:
    """A sequence-classifier reward model: its logit for prompt + completion (module docstring);
    ``options``: :class:`steadyrl.config.reward_options.RewardModelOptions`, whose names and defaults
    they are, grouped once into the reward's parameter objects."""
    from ..config.reward_options import checked_options  # steadyrl.config imports the rewards

    o = checked_options("reward_model", options)  # mean and std: given with normalize: fixed, and only then
    mean, std = (None if x is None else float(x) for x in (o.mean, o.std))
    return RewardModel(LocalModel.of(o), TextScoring(o.batch_size, o.max_length, o.chat_template, o.label_index),
                       Normalization(o.normalize, mean, std), Caching.of(o))
