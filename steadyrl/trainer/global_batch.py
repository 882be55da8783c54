"""A step's samples over all data-parallel ranks: what reward processing and metrics see.

Each rank generates and scores its own share of the prompts (whole groups), but reward
processing has statistics over the whole batch — batch normalisation, whitening, the
REINFORCE++ estimators' whitening, running moments, clip fractions — whose values must not
depend on how the batch was cut over ranks. So the per-sample tensors of every rank are
gathered (responses padded to the longest), processed as one global batch, identically on
every rank (the running statistics stay equal everywhere, so any rank's checkpoint is every
rank's), and each rank keeps its own rows (:meth:`GlobalSamples.mine`). Rank ``r``'s rows are
``r * B ... (r + 1) * B - 1`` of the global batch, ``B`` rows per rank.

The metrics of the step (rewards, lengths, processing) are then those of the global batch. In
one process every function here is the identity and costs nothing.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields

import torch

from .. import distributed as dist
from ..metrics import Metrics
from ..rewards.scoring import ScoreResult
from ..rollout.episodes import turn_reward_tensor

BATCH, STEP = "batch", "step"
"""Where a :class:`GlobalSamples` field comes from: ``BATCH``, the per-token (``RESPONSE`` layout)
:class:`~steadyrl.trainer.batch.TrainBatch` field of the same name, every rank's rows gathered and
padded right to the longest response; ``STEP``, the step's other results (scores, the generation,
dynamic sampling), each gathered its own way in :func:`gather_samples`."""


def _from(source: str, default=MISSING):
    """A :class:`GlobalSamples` field declaring its ``source`` (``BATCH`` or ``STEP``)."""
    return field(default=default, metadata={"source": source})


@dataclass
class GlobalSamples:
    result: ScoreResult = _from(STEP)  # every rank's scores, in rank order
    response_mask: torch.Tensor = _from(BATCH)  # [N, R_max]
    policy_mask: torch.Tensor = _from(BATCH)  # [N, R_max] the policy's own tokens (observations excluded)
    truncated: torch.Tensor = _from(STEP)  # [N]
    old_logprobs: torch.Tensor | None = _from(BATCH)
    ref_logprobs: torch.Tensor | None = _from(BATCH)
    values: torch.Tensor | None = _from(BATCH)
    rollout_logprobs: torch.Tensor | None = _from(BATCH)
    prompt_lengths: list[int] = _from(STEP)  # every rank's prompts
    tokens: int = _from(STEP)  # prompt + response tokens of the whole step
    rows: slice = _from(STEP)  # this rank's rows
    width: int = _from(STEP)  # this rank's response length
    episodes: list | None = _from(STEP, None)  # multi-turn: every rank's EpisodeInfo, in rank order
    turn_rewards: torch.Tensor | None = _from(STEP, None)  # [N, R_max] earlier turns' environment rewards
    # [N] rows dynamic sampling lets train (None: every row); not TrainBatch.selected (the token selection)
    selected: torch.Tensor | None = _from(STEP, None)
    teacher_logprobs: torch.Tensor | None = _from(BATCH, None)  # [N, R_max] on-policy distillation's teacher

    def mine(self, x: torch.Tensor | None) -> torch.Tensor | None:
        """This rank's rows of a global ``[N]`` or ``[N, R_max]`` tensor (its own response length)."""
        if x is None:
            return None
        x = x[self.rows]
        return x[:, : self.width] if x.dim() == 2 else x


PER_TOKEN = tuple(f.name for f in fields(GlobalSamples) if f.metadata["source"] == BATCH)
"""The ``[N, R_max]`` fields :func:`gather_samples` takes from the batch by name: those declared
``BATCH`` above (one place: a new one cannot be declared and left ungathered, silently None)."""


def _pad_right(x: torch.Tensor, width: int) -> torch.Tensor:
    extra = width - x.shape[1]
    return x if extra <= 0 else torch.cat([x, x.new_zeros(x.shape[0], extra)], dim=1)


def _cat_rows(parts: list[torch.Tensor | None]) -> torch.Tensor | None:
    if parts[0] is None:
        return None
    if len(parts) == 1:
        return parts[0]
    if parts[0].dim() == 1:
        return torch.cat(parts)
    width = max(p.shape[1] for p in parts)
    return torch.cat([_pad_right(p, width) for p in parts])


def _zeros_where_none(parts: list, rows: list) -> list:
    """Ranks whose episodes had no turn reward hold None: zeros of their row count, unless all do."""
    if all(p is None for p in parts):
        return [None]
    return [torch.zeros((len(r), 1), dtype=torch.float64) if p is None else p for p, r in zip(parts, rows)]


def merge_results(results: list[ScoreResult]) -> ScoreResult:
    """One :class:`ScoreResult` of several ranks' batches, in order (failures add up; the first
    error text of each function is kept; elapsed times are the slowest rank's; see
    :func:`_merge_reported` for the reward objects' own metrics)."""
    if len(results) == 1:
        return results[0]
    first = results[0]
    reported, counts = _merge_reported(results)
    failures = {name: {} for name in first.names}
    for r in results:
        for name, kinds in r.failures.items():
            for kind, n in kinds.items():
                failures[name][kind] = failures[name].get(kind, 0) + n
    errors: dict[str, str] = {}
    for r in results:
        for name, text in r.errors.items():
            if text and not errors.get(name):
                errors[name] = text
    elapsed = {name: max(r.elapsed_s.get(name, 0.0) for r in results) for name in first.elapsed_s}
    return ScoreResult(names=first.names, weights=first.weights,
                       raw={name: [x for r in results for x in r.raw[name]] for name in first.names},
                       scores=torch.cat([r.scores for r in results]), valid=torch.cat([r.valid for r in results]),
                       failures=failures, errors=errors, elapsed_s=elapsed, metrics=reported, metric_counts=counts,
                       domains=None if first.domains is None else [d for r in results for d in r.domains],
                       routes=first.routes,
                       declined={name: [x for r in results for x in r.declined.get(name, [False] * r.batch_size)]
                                 for name in {n for r in results for n in r.declined}})


def _merge_reported(results: list[ScoreResult]) -> tuple[dict[str, float], set[str]]:
    """Reward objects' own metrics over the ranks (and draws): what the reporter declared a count
    (``ScoreResult.metric_counts``, e.g. ``.../failures/<reason>``) adds up, the rest (rates,
    times) is averaged over the parts that reported it."""
    acc = Metrics()
    for r in results:
        for key, value in r.metrics.items():
            if key in r.metric_counts:
                acc.count(key, value)
            else:
                acc.mean(key, value, 1.0)
    return acc.merged(), {key for r in results for key in r.metric_counts}


def gather_samples(result: ScoreResult, gen, batch, prompt_lengths: list[int],
                   turn_reward: str = "sum", selected: torch.Tensor | None = None) -> GlobalSamples:
    """Every rank's samples of this step (a collective: every rank calls it)."""
    local = {name: getattr(batch, name) for name in PER_TOKEN}
    local.update(truncated=gen.truncated, result=result, prompt_lengths=prompt_lengths,
                 tokens=int(gen.prompt_mask.sum() + gen.response_mask.sum()), episodes=gen.episodes, selected=selected,
                 turn_rewards=turn_reward_tensor(gen.episodes, gen.response_ids.shape[1], turn_reward))
    parts = dist.gather_objects(local)
    rows = len(gen)
    start = dist.rank() * rows
    return GlobalSamples(
        result=merge_results([p["result"] for p in parts]),
        truncated=_cat_rows([p["truncated"] for p in parts]),
        prompt_lengths=[n for p in parts for n in p["prompt_lengths"]],
        tokens=sum(p["tokens"] for p in parts),
        rows=slice(start, start + rows),
        width=gen.response_ids.shape[1],
        episodes=None if parts[0]["episodes"] is None else [e for p in parts for e in p["episodes"]],
        selected=_cat_rows([p["selected"] for p in parts]),
        turn_rewards=_cat_rows(_zeros_where_none([p["turn_rewards"] for p in parts], [p["truncated"] for p in parts])),
        **{name: _cat_rows([p[name] for p in parts]) for name in PER_TOKEN},
    )
