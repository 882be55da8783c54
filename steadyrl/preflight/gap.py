"""``steadyrl doctor CONFIG [key=value ...]``: the pre-flight. Before a run, measure the gap between the
engine that will sample and the trainer that will recompute the log-probs, and say what causes it.

    load the model, tokenizer and prompts as the run would (steadyrl.assembly) -> the engine's copy of the
    policy (rollout.dtype, its attention, its weights) samples a few small batches (the HF engine)
    -> the trainer's forward recomputes their log-probs (steadyrl.trainer.forward)
    -> the gap: mismatch metrics (steadyrl.functional.mismatch_metrics) of the engine's log-probs
    -> attribution: the engine's side rescored with one factor set to the trainer's at a time

The gap measure shared by every cause is the mean absolute per-token log-ratio
``G = |log pi_behaviour - log pi_train|`` over the sampled tokens. Factors do not add up (a top-k gap
swamps a precision gap measured alone against the whole), so a factor's gap is its Shapley value in
the game ``G(S)`` (the engine keeping the factors in ``S``, matching the trainer in the others),

    gap_f = sum_{S not containing f} |S|! (n - |S| - 1)! / n! * ( G(S + f) - G(S) )

(with two factors, the mean of what removing f from the engine removes and what adding it to a
matched engine adds). Signed: a factor that offsets another (bfloat16 noise that happens to hide
part of a top-k gap) is negative, and ``sum_f gap_f = G(all) - G(none)``. ``G(none)``, the gap of an
engine matched in every factor, is what no factor explains (kernels, the decode path); with it the
gaps sum to the whole gap. The template round trip adds its own (:mod:`.roundtrip`). Each cause's
share is its gap over ``G(all)`` (plus the round trip's), so the shares sum to 1 with the ruled-out
causes (``|gap| < tolerance``). Nothing is written. :func:`reward_check` then scores the sampled batches
with the run's rewards (their code runs, as in the run).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from ..config.schema import Config
from ..errors import ConfigError
from .engine_side import EngineSpec, behaviour_logprobs, engine_model
from .roundtrip import RoundTrip

TOLERANCE = 1e-3
"""A cause whose gap (mean |log-ratio| per token) is below this is ruled out."""


@dataclass
class Cause:
    name: str
    title: str
    gap: float
    evidence: str
    change: str
    share: float = 0.0


@dataclass
class Preflight:
    setup: str
    tokens: int
    baseline: float
    metrics: dict[str, float]
    reported: str
    causes: list[Cause]
    ruled_out: list[str]
    tolerance: float
    round_trip: RoundTrip | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.causes


@dataclass
class GapSide:
    """What the pre-flight built: the trainer's model, the engine's copy and spec, the samples."""

    config: Config
    tokenizer: object
    trainer: torch.nn.Module
    engine: torch.nn.Module
    spec: EngineSpec
    gens: list
    chats: list
    trainer_logprobs: list[torch.Tensor]
    weights: torch.nn.Module | None = None
    """The engine's weights as given (stale ones), before the cast to its dtype; None: the trainer's."""
    processor: object | None = None
    """A vision-language model's processor (None for a text model)."""


def default_spec(config: Config, trainer: torch.nn.Module, tokenizer) -> EngineSpec:
    """The engine as ``config`` runs it: ``rollout.dtype`` (else the trainer's), the trainer's attention,
    prompts padded as the tokenizer pads them, its sampling processors, and the log-probs it reports
    (vLLM: processed, after top-k / top-p; the HF engine: of ``softmax(logits / temperature)``)."""
    from ..rollout import DTYPES

    ro = config.rollout
    name = getattr(ro, "dtype", None)
    dtype = DTYPES[name] if name else next(trainer.parameters()).dtype
    return EngineSpec(dtype=dtype, attn=getattr(trainer.config, "_attn_implementation", None),
                      padding_side=getattr(tokenizer, "padding_side", "left") or "left",
                      reported="processed" if ro.engine == "vllm" else "unprocessed",
                      temperature=ro.temperature, top_p=ro.top_p, top_k=ro.top_k)


def _prompts(config: Config, tokenizer, count: int, processor=None):
    """``count`` training prompts rendered as the run renders them, and the chat each came from; a
    vision-language model's (``processor``) with their images, as the run loads them."""
    from ..assembly.prompts import image_options, prompt_options, with_images
    from ..assembly.sources import data_folder
    from ..assembly.task import task_of
    from ..data.chat import prompt_messages, uses_chat_template
    from ..data.prompts import prepare_prompts

    train = task_of(config).records(config, False)[0]  # the user's data, or the demo's generated records
    if not train:
        raise ConfigError("doctor: the config has no training prompt (data.train_path / data.train_sources)")
    records = train[:count]
    options = replace(prompt_options(config, None), tools=None)
    images = image_options(config, records, processor, config.model.name_or_path, data_folder(config.data.train_path))
    items, _ = prepare_prompts(records, tokenizer, with_images(options, processor, images), source="data.train_path")
    chats = [prompt_messages(r["prompt"]) if uses_chat_template(tokenizer, r["prompt"], options.chat_template)
             else None for r in records]
    # an image prompt's chat is the one the processor rendered (its image parts where the images go)
    chats = [item.messages if item.image_inputs is not None else chat for item, chat in zip(items, chats)]
    return items, chats


def build_side(config: Config, *, batches: int, prompts: int, engine: dict | None = None,
               engine_weights: torch.nn.Module | None = None) -> GapSide:
    """Load and sample as the run would; ``engine`` changes the engine's spec (tests inject causes with
    it), ``engine_weights`` gives the engine other weights than the trainer's (stale)."""
    from ..assembly.prompts import build_processor, build_tokenizer
    from ..models import load_policy, resolve_device, resolve_dtype
    from ..rollout import HFEngine, eos_token_ids
    from ..trainer.batch import batch_from_generation
    from ..trainer.forward import response_logprobs

    m, ro = config.model, config.rollout
    if m.name_or_path is None:
        raise ConfigError("doctor: model.name_or_path is not set; the pre-flight needs the model the run "
                          "starts from (a demo run's is RUN_DIR/final: model.name_or_path=RUN_DIR/final)")
    device = resolve_device(config.trainer.device)
    tokenizer = build_tokenizer(config, m.name_or_path)
    processor = build_processor(config, m.name_or_path, train=False)  # None for a text model
    items, chats = _prompts(config, tokenizer, batches * prompts, processor)
    trainer = load_policy(m.name_or_path, dtype=resolve_dtype(m.dtype, device), device=device, revision=m.revision,
                          trust_remote_code=m.trust_remote_code, attn_implementation=m.attn_implementation).eval()
    spec = default_spec(config, trainer, tokenizer).with_(**(engine or {}))
    copy = engine_model(trainer, spec, engine_weights)
    sampler = HFEngine(copy, tokenizer)
    sampler.eos_ids = eos_token_ids(tokenizer, trainer)
    torch.manual_seed(config.trainer.seed)
    gens, rows, logprobs = [], [], []
    for b in range(0, len(items), prompts):
        part = items[b: b + prompts]
        images = [None if p.image_inputs is None else dict(p.image_inputs) for p in part]  # a lazy one loads
        gen = sampler.generate([p.ids for p in part], ro.group_size, max_new_tokens=ro.max_new_tokens,
                               temperature=spec.temperature, top_p=spec.top_p, top_k=spec.top_k,
                               image_inputs=images if any(i is not None for i in images) else None)
        with torch.no_grad():
            lp, _ = response_logprobs(trainer, batch_from_generation(gen).to(device), temperature=ro.temperature,
                                      impl=config.trainer.logprob_impl)
        gens.append(gen)
        logprobs.append(lp.float().cpu())
        rows += [c for c in chats[b: b + prompts] for _ in range(ro.group_size)]
    return GapSide(config, tokenizer, trainer, copy, spec, gens, rows, logprobs, engine_weights, processor)


def gap_sum(side: GapSide, model, spec: EngineSpec, *, reported: bool = False) -> tuple[float, int]:
    """``(sum |log-ratio|, tokens)`` of the engine (``model``, ``spec``) against the trainer."""
    from .engine_side import gap

    total, n = 0.0, 0
    for gen, lp in zip(side.gens, side.trainer_logprobs):
        behaviour, shown = behaviour_logprobs(model, gen, spec)
        k = int(gen.response_mask.sum())
        total += gap(shown if reported else behaviour, lp, gen.response_mask) * k
        n += k
    return total, n


def reward_check(side: GapSide) -> tuple[list[str], list[str]]:
    """The run's rewards on the pre-flight's sampled batches, scored as the run scores them (its data
    rows' columns, its reward specs, the dry call before step 1): ``(problems, lines)``, a problem
    for each reward that failed on every sample (it would fail every sample of every step) with its
    error, a line for each other with its mean over the samples it scored."""
    from ..assembly.task import task_inputs
    from ..rewards.scorer import exception_line

    config = side.config
    _, _, scorer, _ = task_inputs(config)
    per_batch = len(side.gens[0].completions) // config.rollout.group_size if side.gens else 0
    items, _ = _prompts(config, side.tokenizer, per_batch * len(side.gens), side.processor)
    problems, lines, raw, errors = [], [], {}, {}
    try:
        for b, gen in enumerate(side.gens):
            part = [p for p in items[b * per_batch:(b + 1) * per_batch] for _ in range(config.rollout.group_size)]
            result = scorer(part, gen.completions)
            for name in result.names:
                raw.setdefault(name, []).extend(result.raw[name])
                errors.setdefault(name, result.errors.get(name))
    finally:
        scorer.close()
    for name, values in raw.items():
        scored = [v for v in values if v is not None]
        if not scored:
            problems.append(f"reward {name!r} failed on every one of the {len(values)} sampled completions: "
                            f"{exception_line(errors[name] or 'it returned None for each')}")
            continue
        lines.append(f"reward {name!r}: mean {sum(scored) / len(scored):.3g} over {len(scored)} of "
                     f"{len(values)} sampled completions")
    return problems, lines
