"""What a generation engine returns, and the masking rules every engine shares.

Layout: prompts are left-padded ``[B, P]``, responses right-padded ``[B, R]``; row ``i`` of the
responses is a sample of prompt ``i // group_size`` (groups are contiguous). A response is valid
up to and including its first EOS token; one with no EOS in ``max_new_tokens`` is *truncated*.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Protocol

import torch


PROMPT, RESPONSE, ROW, ITEMS = "prompt", "response", "row", "items"
"""How a :class:`Generation` field is aligned with its rows: ``[B, P]`` left-padded prompts,
``[B, R]`` right-padded responses, a ``[B]`` tensor, or a list with one item per row."""

PAD_ID = "pad_id"  # a field padded with the tokenizer's pad token id
NONE_PER_ROW = "none_per_row"  # an ITEMS field a part lacks stands for None in each of its rows


def row_field(layout: str, pad=0, *, optional: bool = False, missing_from: str | None = None,
              encoded: bool = True):
    """A row-aligned :class:`Generation` field: its ``layout``, what pads it (``PAD_ID``: the pad
    token), whether it may be None, the field that stands in for it in a part that lacks it when
    parts are concatenated (``missing_from``), and whether the asynchronous worker sends it."""
    meta = {"layout": layout, "pad": pad, "missing_from": missing_from, "encoded": encoded}
    return field(default=None, metadata=meta) if optional else field(metadata=meta)


@dataclass
class Generation:
    """Sampled responses for a batch of prompts (``B = prompts * n`` rows). Every field is row-aligned
    (:func:`row_field`): :meth:`select`, :func:`concat_generations` and the asynchronous worker's
    encoding go over the fields, so a new per-row input is one field here."""

    prompt_ids: torch.Tensor = row_field(PROMPT, PAD_ID)  # [B, P] left-padded
    prompt_mask: torch.Tensor = row_field(PROMPT)  # [B, P]
    response_ids: torch.Tensor = row_field(RESPONSE, PAD_ID)  # [B, R] right-padded
    response_mask: torch.Tensor = row_field(RESPONSE)  # [B, R], 1 up to and including the first EOS
    truncated: torch.Tensor = row_field(ROW)  # [B] bool: no EOS within max_new_tokens
    completions: list[str] = row_field(ITEMS)  # decoded responses, special tokens skipped
    # [B, R] from the engine (vLLM), else None
    rollout_logprobs: torch.Tensor | None = row_field(RESPONSE, 0.0, optional=True)
    # [B, R] 1 on policy-sampled tokens; None = response_mask (so a part without one is all the policy's)
    policy_mask: torch.Tensor | None = row_field(RESPONSE, optional=True, missing_from="response_mask",
                                                 encoded=False)
    # multi-turn episodes' turns, rewards and counters
    episodes: list[EpisodeInfo] | None = row_field(ITEMS, optional=True, encoded=False)
    # a VLM's image inputs of each row (steadyrl.vlm_inputs: tensors, no token-aligned keys; None = a
    # text row); None = no row has images. Not sent by the asynchronous worker, which refuses VLMs.
    image_inputs: list[dict | None] | None = row_field(ITEMS, optional=True, missing_from=NONE_PER_ROW,
                                                       encoded=False)

    def __len__(self) -> int:
        return self.response_ids.shape[0]

    def select(self, rows: list[int]) -> "Generation":
        """Rows ``rows`` of every field, in that order."""
        index = torch.tensor(rows, dtype=torch.long)

        def pick(f, x):
            if x is None:
                return None
            return [x[i] for i in rows] if f.metadata["layout"] == ITEMS else x[index]

        return Generation(**{f.name: pick(f, getattr(self, f.name)) for f in fields(self)})

    def encoded(self) -> dict:
        """The fields the asynchronous rollout worker sends (tensors and strings), by name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.metadata["encoded"]}

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
                 top_p: float = 1.0, top_k: int = 0, do_sample: bool = True,
                 image_inputs: list[dict | None] | None = None, images: list[tuple] | None = None) -> Generation:
        """``n`` responses to each of ``prompt_ids`` (rows grouped by prompt). ``image_inputs``: a
        VLM's image inputs of each prompt (None = text only; ``prompt_ids`` already hold the
        expanded image tokens); ``images``: the same prompts' PIL images, for an engine that
        processes images itself (vLLM)."""
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
    env_reward: float | None = None  # turn rewards combined (rollout.multi_turn.turn_reward); None = none given
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
    # rollout.multi_turn.mode stepwise: each turn as a sample (rollout.stepwise.TurnSample), else None
    samples: list | None = None
    # rollout.multi_turn.agent episodes (steadyrl.gateway): what the agent returned and how its calls went
    gateway: bool = False
    agent_reward: float | None = None  # None: the reward functions score the transcript
    agent_calls: int = 0
    non_append_calls: int = 0  # calls that extended no earlier call's context
    off_policy_calls: int = 0  # calls sampled with a temperature / top-p other than the run's
    timed_out: bool = False
    call_failure: str | None = None  # why the agent's call to the gateway failed ("HTTP 503", "connection error (...)")


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
    right-padded to the longest; a field that only some parts have is filled from its
    ``missing_from`` field in the others (``policy_mask``: the response mask), a list that some
    part lacks is None (``image_inputs``: None for each of that part's rows)."""
    if len(parts) == 1:
        return parts[0]
    longest = {PROMPT: max(g.prompt_ids.shape[1] for g in parts), RESPONSE: max(g.response_ids.shape[1] for g in parts)}

    def joined(f):
        layout, missing_from = f.metadata["layout"], f.metadata["missing_from"]
        values = [getattr(g, f.name) for g in parts]
        if layout == ITEMS and missing_from == NONE_PER_ROW and any(v is not None for v in values):
            values = [[None] * len(g) if v is None else v for g, v in zip(parts, values)]
        if all(v is None for v in values) or (layout == ITEMS and any(v is None for v in values)):
            return None
        if layout == ITEMS:
            return [item for v in values for item in v]
        if missing_from is not None:
            values = [getattr(g, missing_from) if v is None else v for g, v in zip(parts, values)]
        if layout == ROW:
            return torch.cat(values)
        pad = pad_id if f.metadata["pad"] == PAD_ID else f.metadata["pad"]
        return torch.cat([_pad_to(v, longest[layout], pad, layout == PROMPT) for v in values])

    return Generation(**{f.name: joined(f) for f in fields(Generation)})
