"""Loading policies, critics and tokenizers, by hub name or local directory.

* :func:`load_tokenizer` / :func:`load_policy`: any ``AutoModelForCausalLM`` (or, for a config
  with a ``vision_config``, ``AutoModelForImageTextToText``: a vision-language model); a missing local
  path or a hub name that cannot be fetched (offline machine, typo) is a :class:`ModelLoadError`
  with one clear message, not a stack of hub errors.
* :class:`ValueModel`: a critic — a causal LM's backbone with a scalar value head (not on a VLM).
* :func:`freeze_vision` / :func:`language_lora_targets`: a VLM trains its language model only
  (``model.freeze_vision``), and its LoRA adapters sit on the language model's linear layers.
* :func:`lm_backbone_and_head`: the pieces the fused log-prob path needs (hidden states and the
  LM-head weight), or ``None`` for models whose logits are not a plain linear map of the last
  hidden state (logit soft-capping or scaling), which then use the logits path.
"""

from __future__ import annotations

import json
import os
import socket  # noqa: F401  (tests patch models.socket: the same module model_files uses)
from pathlib import Path

import torch
from torch import nn

from .errors import ConfigError, ModelLoadError
from .model_files import (  # noqa: F401  (torch-free checks, re-exported where they used to live)
    hub_offline,
    hub_unreachable,
    check_hub_reachable,
    check_model_source,
    check_weight_files,
    safetensors_problem,
)

_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("trainer.device = 'cuda' but no CUDA device is available; use 'auto' or 'cpu'")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """The dtype a model that is not trained (evaluation, a reward model) is loaded in: ``auto`` is
    bfloat16 on a CUDA GPU that supports it. Trained weights follow :func:`resolve_precision`."""
    if name == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    if name == "float16" and device.type == "cpu":
        raise ModelLoadError("model.dtype = 'float16' is not supported on the CPU (sampling overflows "
                             "to NaN); use 'float32' or 'bfloat16'")
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def resolve_precision(model_config, device: torch.device, rollout_dtype: str | None = None):
    """The :class:`~steadyrl.precision.PrecisionPlan` of ``model.dtype`` / ``model.bf16_update`` on
    ``device`` (a float16 model on the CPU is refused by :func:`resolve_dtype`)."""
    from .precision import precision_plan

    resolve_dtype(model_config.dtype, device)
    bf16_ok = device.type != "cuda" or torch.cuda.is_bf16_supported()
    return precision_plan(model_config.dtype, model_config.bf16_update, device.type,
                          rollout_dtype=rollout_dtype, bf16_supported=bf16_ok)


def _load_error(field: str, name: str, exc: Exception) -> ModelLoadError:
    offline = os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("TRANSFORMERS_OFFLINE") == "1"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    hint = (
        " The machine is offline (HF_HUB_OFFLINE=1) and the model is not in the local cache: "
        "download it first or point to a local directory."
        if offline
        else " It is not a local directory and the hub could not provide it (a typo, a private "
        "repo, or no network?)."
    )
    return ModelLoadError(f"{field} = {name!r} could not be loaded: {first}.{hint}")


def load_tokenizer(name: str, *, revision: str | None = None, trust_remote_code: bool = False,
                   field: str = "model.tokenizer"):
    """A tokenizer with left padding (for generation) and a pad token (EOS when it has none)."""
    from transformers import AutoTokenizer

    check_model_source(field, name)
    try:
        tok = AutoTokenizer.from_pretrained(name, revision=revision, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        raise _load_error(field, name, exc) from None
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        if tok.eos_token_id is None:
            raise ModelLoadError(f"{field} = {name!r}: the tokenizer has neither a pad nor an EOS token")
        tok.pad_token = tok.eos_token
    return tok


def load_policy(name: str, *, dtype: torch.dtype, device: torch.device, revision: str | None = None,
                trust_remote_code: bool = False, attn_implementation: str | None = None,
                field: str = "model.name_or_path"):
    """An ``AutoModelForCausalLM`` on ``device`` in ``dtype``, with dropout switched off; a
    vision-language model (:func:`steadyrl.vlm.is_vision_config`) as ``AutoModelForImageTextToText``."""
    from transformers import AutoModelForCausalLM

    check_model_source(field, name)
    kwargs = {"revision": revision, "trust_remote_code": trust_remote_code, "dtype": dtype}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    auto = AutoModelForCausalLM
    if is_vision_model(name, revision=revision, trust_remote_code=trust_remote_code):
        from transformers import AutoModelForImageTextToText as auto
    try:
        model = auto.from_pretrained(name, **kwargs)
    except ImportError as exc:
        if attn_implementation:
            raise ModelLoadError(f"model.attn_implementation = {attn_implementation!r} is not available "
                                 f"here: {str(exc).splitlines()[0]}. Leave it null for transformers' "
                                 "default (sdpa).") from None
        raise
    except (OSError, ValueError) as exc:
        if attn_implementation and attn_implementation in str(exc):
            raise ModelLoadError(f"model.attn_implementation = {attn_implementation!r}: "
                                 f"{str(exc).splitlines()[0]}") from None
        raise _load_error(field, name, exc) from None
    disable_dropout(model)
    return model.to(device)


def is_vision_model(name: str, *, revision: str | None = None, trust_remote_code: bool = False) -> bool:
    """Whether the model at ``name`` is a vision-language model (its config has a ``vision_config``);
    False when its config cannot be read (loading then says why)."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(name, revision=revision, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError):
        return False
    return is_vision_config(config)


def disable_dropout(model: nn.Module) -> None:
    """Dropout inflates the KL and the ratio from step 0; RL post-training runs without it."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    config = getattr(model, "config", None)
    for key in ("attention_dropout", "hidden_dropout", "dropout", "resid_pdrop", "attn_pdrop", "embd_pdrop"):
        if config is not None and isinstance(getattr(config, key, None), float):
            setattr(config, key, 0.0)


def unwrap(model: nn.Module) -> nn.Module:
    """The plain transformers model under DDP/FSDP wrappers and a PEFT wrapper."""
    model = getattr(model, "module", model)
    if hasattr(model, "get_base_model"):
        model = model.get_base_model()
    return model


def lm_backbone_and_head(model: nn.Module):
    """``(backbone, lm_head)`` for the fused log-prob path, or ``None`` if logits are not
    ``lm_head(last_hidden_state)`` for this model."""
    lm = unwrap(model)
    config = getattr(lm, "config", None)
    for key in _LOGIT_TRANSFORMS:
        value = getattr(config, key, None)
        if value not in (None, 1, 1.0, 0, 0.0, False):
            return None
    prefix = getattr(lm, "base_model_prefix", None)
    backbone = getattr(lm, prefix, None) if prefix else None
    head = lm.get_output_embeddings() if hasattr(lm, "get_output_embeddings") else None
    if backbone is None or not isinstance(head, nn.Linear):
        return None
    return backbone, head


class ValueModel(nn.Module):
    """A critic: a causal LM's backbone (``AutoModel``) and a linear value head on its last
    hidden state, ``V = w . h + b`` per token. Saved as the backbone's ``save_pretrained`` files
    plus ``value_head.pt``."""

    def __init__(self, backbone: nn.Module, hidden_size: int):
        super().__init__()
        self.backbone = backbone
        self.value_head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    @classmethod
    def from_pretrained(cls, name: str, *, dtype: torch.dtype, device: torch.device,
                        trust_remote_code: bool = False, field: str = "model.critic_name_or_path"):
        from transformers import AutoModel

        check_model_source(field, name)
        if is_vision_model(name, trust_remote_code=trust_remote_code):
            raise ConfigError(f"{field} = {name!r} is a vision-language model: a critic (algorithm.advantage_estimator"
                              " = gae) is not supported on one, because its value head reads text-only hidden "
                              "states; use a critic-free estimator (grpo, rloo, ...) or a text model's critic")
        try:
            backbone = AutoModel.from_pretrained(name, dtype=dtype, trust_remote_code=trust_remote_code)
        except (OSError, ValueError) as exc:
            raise _load_error(field, name, exc) from None
        disable_dropout(backbone)
        model = cls(backbone, backbone.config.hidden_size)
        head = Path(name) / "value_head.pt"
        if head.is_file():
            model.value_head.load_state_dict(torch.load(head, map_location="cpu", weights_only=True))
        return model.to(device=device, dtype=dtype)

    def forward(self, input_ids, attention_mask, position_ids=None) -> torch.Tensor:
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask,
                            position_ids=position_ids, use_cache=False)
        return self.value_head(out.last_hidden_state).squeeze(-1).float()

    def save_pretrained(self, path: str | Path) -> None:
        path = Path(path)
        self.backbone.save_pretrained(path)
        torch.save(self.value_head.state_dict(), path / "value_head.pt")
        (path / "steadyrl_critic.json").write_text(json.dumps({"kind": "value_model"}))


def apply_lora(model: nn.Module, lora_config) -> nn.Module:
    """Wrap ``model`` with PEFT LoRA adapters (the ``peft`` extra); on a vision-language model
    only the language model's linear layers get one (:func:`language_lora_targets`)."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ModelLoadError("model.lora.enabled needs the peft extra: pip install 'steadyrl[peft]'") from None
    targets = lora_config.target_modules
    if is_vision_config(getattr(model, "config", None)):
        targets = language_lora_targets(model, targets)
    config = LoraConfig(
        r=lora_config.r,
        lora_alpha=lora_config.alpha,
        lora_dropout=lora_config.dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
    )
    try:
        return get_peft_model(model, config)
    except ValueError as exc:
        raise ModelLoadError(f"model.lora.target_modules = {lora_config.target_modules!r}: "
                             f"{str(exc).splitlines()[0]}") from None


def is_vision_config(config) -> bool:
    """:func:`steadyrl.vlm.is_vision_config` (the same rule: a ``vision_config``), which this floor's
    neighbour may not be imported for."""
    return getattr(config, "vision_config", None) is not None


VISION_PARTS = ("visual", "vision_tower", "vision_model", "multi_modal_projector", "mm_projector", "connector",
                "vision_embed_tokens", "embed_vision")
"""Submodule names of a VLM's vision side (tower and projector): Qwen2-VL ``model.visual`` (its
merger included), LLaVA / Gemma 3 / InternVL ``model.vision_tower`` + ``model.multi_modal_projector``,
SmolVLM / Idefics3 ``model.vision_model`` + ``model.connector``."""


def vision_modules(model: nn.Module) -> dict[str, nn.Module]:
    """The vision tower and projector of a VLM by qualified name: submodules named as in
    :data:`VISION_PARTS`, else (an unknown family) the outermost modules built from the config's
    ``vision_config``. Empty for a text model."""
    lm = unwrap(model)
    config = getattr(lm, "config", None)
    if not is_vision_config(config):
        return {}
    found = {}
    for name, module in lm.named_modules():
        if name.rsplit(".", 1)[-1] in VISION_PARTS and not any(name.startswith(f + ".") for f in found):
            found[name] = module
    if not found:
        vision_type = type(config.vision_config)
        for name, module in lm.named_modules():
            if isinstance(getattr(module, "config", None), vision_type) and not any(
                    name.startswith(f + ".") for f in found):
                found[name] = module
    return found


def freeze_vision(model: nn.Module) -> list[str]:
    """``model.freeze_vision``: the vision tower and projector of a VLM kept as they are
    (``requires_grad`` False; the optimizer skips them). Returns the frozen modules' names
    (empty for a text model); a VLM whose vision part cannot be found is a :class:`ModelLoadError`."""
    parts = vision_modules(model)
    if not parts and is_vision_config(getattr(unwrap(model), "config", None)):
        raise ModelLoadError("model.freeze_vision = true, but no vision tower was found in the model (looked for "
                             f"{list(VISION_PARTS)} and modules built from its vision_config); set "
                             "model.freeze_vision = false to train the whole model")
    for module in parts.values():
        module.requires_grad_(False)
    return list(parts)


def language_lora_targets(model: nn.Module, target_modules) -> list[str]:
    """The qualified names of the linear layers LoRA adapts on a VLM: those outside its vision
    tower, projector and LM head that ``target_modules`` names (``'all-linear'``: every one; a
    list: those whose name ends with one of its entries)."""
    vision = list(vision_modules(model))
    wanted = None if target_modules == "all-linear" else [target_modules] if isinstance(target_modules, str) \
        else list(target_modules)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    names = []
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear) or module is head:
            continue
        if any(name == v or name.startswith(v + ".") for v in vision):
            continue
        if wanted is None or any(name == w or name.endswith("." + w) for w in wanted):
            names.append(name)
    if not names:
        raise ModelLoadError(f"model.lora.target_modules = {target_modules!r} names no linear layer of the "
                             "vision-language model's language model")
    return names
