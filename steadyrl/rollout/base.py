"""What a generation engine returns, and the masking rules every engine shares.

Layout: prompts are left-padded ``[B, P]``, responses right-padded ``[B, R]``; row ``i`` of the
responses is a sample of prompt ``i // group_size`` (groups are contiguous). A response is valid
up to and including its first EOS token; one with no EOS in ``max_new_tokens`` is *truncated*.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch


@dataclass
class Generation:
    """Sampled responses for a batch of prompts (``B = prompts * n`` rows)."""

    prompt_ids: torch.Tensor  # [B, P] left-padded
    prompt_mask: torch.Tensor  # [B, P]
    response_ids: torch.Tensor  # [B, R] right-padded
    response_mask: torch.Tensor  # [B, R], 1 up to and including the first EOS
    truncated: torch.Tensor  # [B] bool: no EOS within max_new_tokens
    completions: list[str]  # decoded responses, special tokens skipped
    rollout_logprobs: torch.Tensor | None = None  # [B, R] from the engine (vLLM), else None
    policy_mask: torch.Tensor | None = None  # [B, R] 1 on policy-sampled tokens; None = response_mask
    episodes: list[EpisodeInfo] | None = None  # multi-turn episodes' turns, rewards and counters

    def __len__(self) -> int:
        return self.response_ids.shape[0]

    def select(self, rows: list[int]) -> "Generation":
        """Rows ``rows`` of every per-sample field, in that order."""
        index = torch.tensor(rows, dtype=torch.long)
        pick = lambda x: None if x is None else x[index]  # noqa: E731
        return Generation(prompt_ids=self.prompt_ids[index], prompt_mask=self.prompt_mask[index],
                          response_ids=self.response_ids[index], response_mask=self.response_mask[index],
                          truncated=self.truncated[index], completions=[self.completions[i] for i in rows],
                          rollout_logprobs=pick(self.rollout_logprobs), policy_mask=pick(self.policy_mask),
                          episodes=None if self.episodes is None else [self.episodes[i] for i in rows])

    @property
    def trained_mask(self) -> torch.Tensor:
        """``[B, R]`` the tokens the policy sampled: the only ones a loss, KL, entropy or length
        metric may count (observations are attended to, never trained on)."""
        return self.response_mask if self.policy_mask is None else self.policy_mask


class Engine(Protocol):
    """What the trainer needs of a generation engine (:class:`~steadyrl.rollout.hf.HFEngine`,
    :class:`~steadyrl.rollout.vllm.VLLMEngine`): ``n`` samples of each prompt, and the trained
    weights before the next generation."""

    def generate(self, prompt_ids: list[list[int]], n: int, *, max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, top_k: int = 0, do_sample: bool = True) -> Generation:
        """``n`` responses to each of ``prompt_ids`` (rows grouped by prompt)."""
        ...

    def update_weights(self, model) -> None:
        """Generate from ``model``'s current weights from now on."""
        ...


class Generator(Protocol):
    """What the HF engine generates with (``Run.generator``): the policy itself (a Hugging Face
    causal LM), or :class:`~steadyrl.distributed.FSDPGenerator` when the policy is sharded."""

    generation_config: object

    @property
    def training(self) -> bool: ...

    def generate(self, **kwargs) -> torch.Tensor: ...

    def parameters(self): ...

    def eval(self) -> "Generator": ...

    def train(self, mode: bool = True) -> "Generator": ...


class Tokenizer(Protocol):
    """The part of a Hugging Face tokenizer a run uses: encode, decode, pad and end tokens, templates."""

    pad_token_id: int | None
    eos_token_id: int | None

    def __call__(self, text, **kwargs) -> dict: ...

    def decode(self, ids, **kwargs) -> str: ...


@dataclass
class EpisodeInfo:
    """One multi-turn episode beyond its tokens: what the metrics, rewards and samples need."""

    turns: int = 1
    turn_ends: list[int] = field(default_factory=list)  # response position of each turn's last token
    turn_rewards: list[float | None] = field(default_factory=list)  # the environment's, per turn
    env_reward: float | None = None  # turn rewards combined (rollout.turn_reward); None = none given
    failed: bool = False  # the environment crashed: the episode is left out of the update
    error: str | None = None
    truncation: str | None = None  # the limit that cut it: max_new_tokens, max_episode_tokens, max_observation_tokens, max_turns
    tool_calls: int = 0
    tool_errors: dict[str, int] = field(default_factory=dict)  # by tool name ('parse', 'unknown')
    observation_tokens: int = 0
    env_time_s: float = 0.0
    drift_tokens: int = 0  # tokens of a turn's context that differ from the trained sequence (always 0)
    messages: list[dict] = field(default_factory=list)  # the transcript after the prompt
    # the same turns as the conversation keeps them (assistant turns parsed, with tool_calls): what
    # TRL's tool loop passes a reward as a completion, and what a TRL-style reward gets here
    chat: list[dict] = field(default_factory=list)
    # rollout.multi_turn_mode stepwise: each turn as a sample (rollout.stepwise.TurnSample), else None
    samples: list | None = None
    # rollout.agent episodes (steadyrl.gateway): what the agent returned and how its calls went
    gateway: bool = False
    agent_reward: float | None = None  # None: the reward functions score the transcript
    agent_calls: int = 0
    non_append_calls: int = 0  # calls that extended no earlier call's context
    off_policy_calls: int = 0  # calls sampled with a temperature / top-p other than the run's
    timed_out: bool = False


def response_mask_from_ids(
    response_ids: torch.Tensor, eos_ids: list[int], max_new_tokens: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(response_mask, truncated)``: valid up to and including the first EOS of each row.

    A row with no EOS is valid over every generated position and marked truncated when it
    filled ``max_new_tokens``.
    """
    is_eos = torch.zeros_like(response_ids, dtype=torch.bool)
    for eos in eos_ids:
        is_eos |= response_ids == eos
    has_eos = is_eos.any(-1)
    positions = torch.arange(response_ids.shape[1], device=response_ids.device)
    first_eos = torch.where(has_eos, is_eos.float().argmax(-1), torch.full_like(has_eos, response_ids.shape[1], dtype=torch.long))
    mask = positions.unsqueeze(0) <= first_eos.unsqueeze(1)
    mask &= positions.unsqueeze(0) < response_ids.shape[1]
    truncated = ~has_eos & (response_ids.shape[1] >= max_new_tokens)
    return mask.long(), truncated


def eos_token_ids(tokenizer, model=None) -> list[int]:
    """Every id that ends a response: the tokenizer's EOS and the model's generation EOS ids.
    Without ``model`` (at start-up, before it loads), the generation config saved beside the
    tokenizer (``generation_config.json`` in its folder or local cache), so the start-up checks
    see the stop tokens generation will use (Gemma's ``<end_of_turn>``, GLM's role tokens)."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen = getattr(model, "generation_config", None) if model is not None else _saved_generation_config(tokenizer)
    extra = getattr(gen, "eos_token_id", None)
    if isinstance(extra, int):
        ids.add(extra)
    elif isinstance(extra, (list, tuple)):
        ids.update(int(i) for i in extra)
    return sorted(ids)


def _saved_generation_config(tokenizer):
    """The ``GenerationConfig`` saved with the tokenizer's model, if one is on disk (never downloaded)."""
    name = getattr(tokenizer, "name_or_path", "") or ""
    if not name:
        return None
    try:
        from transformers import GenerationConfig

        return GenerationConfig.from_pretrained(name, local_files_only=True)
    except Exception:  # noqa: BLE001 - no saved config (or an unreadable one): the tokenizer's EOS alone
        return None


def _pad_to(x: torch.Tensor | None, length: int, value, left: bool) -> torch.Tensor | None:
    extra = length - x.shape[1] if x is not None else 0
    if extra <= 0:
        return x
    pad = torch.full((x.shape[0], extra), value, dtype=x.dtype)
    return torch.cat([pad, x] if left else [x, pad], dim=1)


def concat_generations(parts: list[Generation], pad_id: int) -> Generation:
    """One :class:`Generation` of several, rows in order: prompts left-padded and responses
    right-padded to the longest."""
    if len(parts) == 1:
        return parts[0]
    p = max(g.prompt_ids.shape[1] for g in parts)
    r = max(g.response_ids.shape[1] for g in parts)

    def responses(name: str, value):
        values = [getattr(g, name) for g in parts]
        if all(v is None for v in values):
            return None
        if name == "policy_mask":  # a part without one is all the policy's
            values = [g.trained_mask for g in parts]
        return torch.cat([_pad_to(v, r, value, False) for v in values])

    episodes = [g.episodes for g in parts]
    return Generation(
        prompt_ids=torch.cat([_pad_to(g.prompt_ids, p, pad_id, True) for g in parts]),
        prompt_mask=torch.cat([_pad_to(g.prompt_mask, p, 0, True) for g in parts]),
        response_ids=responses("response_ids", pad_id),
        response_mask=responses("response_mask", 0),
        truncated=torch.cat([g.truncated for g in parts]),
        completions=[c for g in parts for c in g.completions],
        rollout_logprobs=responses("rollout_logprobs", 0.0),
        policy_mask=responses("policy_mask", 0),
        episodes=None if any(e is None for e in episodes) else [e for es in episodes for e in es],
    )
