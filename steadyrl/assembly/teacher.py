"""The teacher of on-policy distillation (``teacher.*``): checked against the policy's tokenizer, then loaded.

The teacher scores the student's sampled token ids, so it must read them as the same tokens: its
tokenizer's vocabulary (``get_vocab()``, token string -> id) must equal the policy's. A different
vocabulary is refused (exit 2, naming both models and their vocabulary sizes) when the tokenizers
are compared, which reads tokenizer files only: before any weights are loaded for a user's model,
and right after the demo builds its own. There is no cross-tokenizer path.

The teacher is loaded like the reference (same loader, frozen, dropout off, ``eval()``), on
``teacher.device`` when set, in ``teacher.dtype``. A LoRA student keeps its own adapter reference;
the teacher is always a separate model.
"""

from __future__ import annotations

import hashlib
import json

import torch

from ..config.schema import Config
from ..errors import ConfigError
from ..models import is_vision_config, load_policy, load_tokenizer, resolve_device, resolve_dtype


def _fingerprint(vocab: dict[str, int]) -> str:
    return hashlib.sha256(json.dumps(sorted(vocab.items()), ensure_ascii=True).encode()).hexdigest()[:12]


def check_teacher_tokenizer(config: Config, tokenizer, policy_name: str) -> None:
    """Refuse a teacher whose vocabulary differs from the policy's ``tokenizer`` (a :class:`ConfigError`)."""
    t = config.teacher
    if t.name_or_path is None or tokenizer is None:
        return
    theirs = load_tokenizer(t.name_or_path, revision=t.revision, trust_remote_code=t.trust_remote_code,
                            field="teacher.name_or_path").get_vocab()
    ours = tokenizer.get_vocab()
    if theirs == ours:
        return
    differing = sorted(k for k in set(ours) ^ set(theirs))[:3] or sorted(k for k in ours if ours[k] != theirs[k])[:3]
    raise ConfigError(
        f"teacher.name_or_path = {t.name_or_path!r} has a vocabulary of {len(theirs)} tokens (fingerprint "
        f"{_fingerprint(theirs)}) but the policy {policy_name!r} has {len(ours)} (fingerprint {_fingerprint(ours)}); "
        f"e.g. tokens {differing!r} differ. On-policy distillation scores the student's token ids with the "
        "teacher, so both must share one tokenizer: choose a teacher of the same model family (same tokenizer)")


def teacher_device(config: Config, device: torch.device) -> torch.device:
    """Where the teacher runs: ``teacher.device``, else the trainer's device."""
    return device if config.teacher.device is None else resolve_device(config.teacher.device)


def load_teacher(config: Config, device: torch.device, *, vision_policy: bool = False) -> torch.nn.Module | None:
    """The frozen teacher model on its device, or None without ``teacher.name_or_path``. With a
    vision-language policy (``vision_policy``) the teacher must be one too: it reads the same ids,
    image tokens included, with the same images (a text teacher is a :class:`ConfigError`)."""
    t = config.teacher
    if t.name_or_path is None:
        return None
    where = teacher_device(config, device)
    model = load_policy(t.name_or_path, dtype=resolve_dtype(t.dtype, where), device=where, revision=t.revision,
                        trust_remote_code=t.trust_remote_code, field="teacher.name_or_path")
    if vision_policy and not is_vision_config(getattr(model, "config", None)):
        raise ConfigError(f"teacher.name_or_path = {t.name_or_path!r} is a text model, but the policy is a "
                          "vision-language model: the teacher scores the student's ids, image tokens included, "
                          "with the prompts' images; choose a vision-language teacher of the same family")
    return model.eval().requires_grad_(False)
