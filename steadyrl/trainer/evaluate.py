"""Held-out evaluation: accuracy and mean reward of greedy completions, and pass@k of samples.

* ``accuracy``: fraction of prompts whose greedy completion scores at least
  ``eval.correct_threshold`` on the accuracy reward (the first reward unless
  ``eval.accuracy_reward`` names another); a completion the reward cannot score counts as wrong.
* ``reward_mean``: mean combined reward of the greedy completions that could be scored.
* ``pass@k`` for k = 1 and k = ``eval.num_samples`` (and powers of two between): the unbiased
  estimator ``1 - C(n - c, k) / C(n, k)`` over ``n = num_samples`` sampled completions per prompt,
  ``c`` of them correct (Chen et al., 2021).
"""

from __future__ import annotations

import math

import torch

from .prompts import completion_token_ids


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of ``k`` draws without replacement from ``n`` samples, ``c``
    of them correct, is correct."""
    if k > n:
        raise ValueError(f"pass@k needs k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _ks(n: int) -> list[int]:
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return ks + [n]


def _correct(result, name: str, threshold: float) -> list[bool]:
    """A NaN, inf or missing score is never a correct answer."""
    return [s is not None and math.isfinite(s) and s >= threshold for s in result.raw[name]]


def _report_failures(result, shown: set[str]) -> None:
    for name, text in result.errors.items():
        if text and name not in shown:
            shown.add(name)
            print(f"steadyrl: during evaluation, reward function {name!r} failed (shown once):\n{text}", flush=True)


@torch.no_grad()
def evaluate(engine, scorer, prompts: list, eval_config, rollout_config) -> dict:
    """Evaluate the engine's model on ``prompts`` (:class:`~steadyrl.trainer.prompts.PromptItem`)."""
    if not prompts:
        return {}
    max_new = eval_config.max_new_tokens or rollout_config.max_new_tokens
    name = eval_config.accuracy_reward or scorer.names[0]
    if name not in scorer.names:
        raise ValueError(f"eval.accuracy_reward {name!r} is not one of the rewards {scorer.names}")
    correct, scored, rewards, shown = [], 0, 0.0, set()
    step = eval_config.batch_size
    for start in range(0, len(prompts), step):
        chunk = prompts[start : start + step]
        gen = engine.generate([p.ids for p in chunk], 1, max_new_tokens=max_new, do_sample=False)
        result = scorer(chunk, gen.completions, completion_token_ids(gen.response_ids, gen.response_mask))
        _report_failures(result, shown)
        correct += _correct(result, name, eval_config.correct_threshold)
        scored += int(result.valid.sum())
        rewards += float(result.scores[result.valid].sum())
    out = {"accuracy": round(sum(correct) / len(correct), 6), "reward_mean": round(rewards / max(scored, 1), 6),
           "num_prompts": len(prompts)}
    n = eval_config.num_samples
    if n > 0:
        counts = []
        per_call = max(1, step // n)
        for start in range(0, len(prompts), per_call):
            chunk = prompts[start : start + per_call]
            gen = engine.generate([p.ids for p in chunk], n, max_new_tokens=max_new,
                                  temperature=eval_config.temperature)
            result = scorer([p for p in chunk for _ in range(n)], gen.completions,
                            completion_token_ids(gen.response_ids, gen.response_mask))
            _report_failures(result, shown)
            ok = _correct(result, name, eval_config.correct_threshold)
            counts += [sum(ok[i * n : (i + 1) * n]) for i in range(len(chunk))]
        for k in _ks(n):
            out[f"pass@{k}"] = round(sum(pass_at_k(n, c, k) for c in counts) / len(counts), 6)
    return out
