"""A tiny Qwen2 (weights ~N(0, 0.02), as a pretrained LM's) and the 'weights moved after 2 steps at
lr 1e-6' measurement the precision tests share (docs/precision.md)."""

from __future__ import annotations

from dataclasses import replace

import support
import torch

from steadyrl.assembly.setup import build_models, build_optimizer
from steadyrl.config import load_config
from steadyrl.precision import precision_plan
from steadyrl.trainer.optim import trained_value
from steadyrl.trainer.update import ppo_update

CPU = torch.device("cpu")
LR = 1e-6


def build_tiny_qwen2(directory, *, hidden: int = 64, layers: int = 2, seed: int = 0):
    """A random Qwen2 over the demo's character tokenizer, saved with ``save_pretrained``."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from steadyrl.demo.task import VOCAB_CHARS
    from steadyrl.demo.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer(VOCAB_CHARS)
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, intermediate_size=2 * hidden,
                         max_position_embeddings=128, initializer_range=0.02, tie_word_embeddings=False,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():  # norms at 1.0 would hide nothing; every matrix ~N(0, 0.02)
        for name, p in model.named_parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.02)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def config(dtype: str, update: str = "kahan", *more: str):
    return load_config(None, ["trainer.device=cpu", "algorithm.kl_mode=none", f"optim.lr={LR}",
                              f"optim.critic_lr={LR}", f"model.dtype={dtype}", f"model.bf16_update={update}",
                              *more])


def batch(seed: int = 0):
    b = support.tiny_batch(seed=seed, rows=8, response=5)
    return replace(b, old_logprobs=None, ref_logprobs=None, values=None)


def moved_fraction(before: list[torch.Tensor], after: list[torch.Tensor]) -> float:
    changed = sum(int((a != b).sum()) for a, b in zip(after, before))
    return changed / sum(a.numel() for a in after)


def two_steps(model_dir, cfg, device_type: str = "cpu", optimizer_update: str | None = None, with_critic=False):
    """Build the models as ``cfg`` on ``device_type`` would (on the CPU), run 2 updates at lr 1e-6
    -> ``(policy fraction moved, critic fraction moved or None, policy, optimizer)``."""
    torch.manual_seed(0)
    plan = precision_plan(cfg.model.dtype, cfg.model.bf16_update, device_type)
    policy, _, critic, _ = build_models(cfg, str(model_dir), CPU, plan)
    update = optimizer_update or cfg.model.bf16_update
    opt = build_optimizer(policy.parameters(), cfg.optim, LR, update)
    copt = build_optimizer(critic.parameters(), cfg.optim, LR, update) if with_critic else None
    trained = [p for p in policy.parameters() if p.requires_grad]
    ctrained = [p for p in critic.parameters() if p.requires_grad] if with_critic else []
    before = [trained_value(p, opt).clone() for p in trained]
    cbefore = [trained_value(p, copt).clone() for p in ctrained]
    for step in range(2):
        b = batch(seed=step)
        if with_critic:
            b = replace(b, values=torch.zeros_like(b.advantages), returns=b.advantages.clone())
        ppo_update(policy, opt, b, cfg, kl_coef=0.0, critic=critic, critic_optimizer=copt, device=CPU)
    moved = moved_fraction(before, [trained_value(p, opt) for p in trained])
    cmoved = moved_fraction(cbefore, [trained_value(p, copt) for p in ctrained]) if with_critic else None
    return moved, cmoved, policy, opt
