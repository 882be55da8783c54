"""Held-out evaluation: accuracy and mean reward of greedy completions, and pass@k of samples.

* ``accuracy``: fraction of prompts whose greedy completion scores at least
  ``eval.correct_threshold`` on the accuracy reward (the first reward unless
  ``eval.accuracy_reward`` names another); a completion the reward cannot score counts as wrong.
* ``reward_mean``: mean combined reward of the greedy completions that could be scored.
* ``pass@k`` for k = 1 and k = ``eval.num_samples`` (and powers of two between): the unbiased
  estimator ``1 - C(n - c, k) / C(n, k)`` over ``n = num_samples`` sampled completions per prompt,
  ``c`` of them correct (Chen et al., 2021).

With tools or an environment every completion is a whole episode (:mod:`steadyrl.rollout.driver`): greedy
success and pass@k are over episodes, and the environment's reward can decide correctness
(``eval.accuracy_reward: environment``).

A metric that cannot be computed is ``None`` (``null`` in metrics.jsonl and summary.json,
``n/a`` on the console), never 0: ``accuracy`` when the accuracy reward scored none of the greedy
completions (it failed on every one), ``reward_mean`` when no greedy completion could be scored,
``pass@k`` when the accuracy reward scored none of the samples. A score of 0 means wrong
answers; a failing reward function means nothing was measured.

With reward domains, accuracy and pass@k count only the prompts the accuracy reward applies to
(a prompt of another domain is neither right nor wrong; no such prompt: no accuracy). Several
held-out sets (``data.eval_sources``, :func:`evaluate_sets`) are each evaluated on their own,
``<set>/accuracy`` etc., and together: the overall numbers are over all their prompts.
"""

from __future__ import annotations

import math

import torch

from .. import distributed as dist
from ..printable import printable
from ..progress import progress
from ..rewards.scorer import AGENT_REWARD, ENVIRONMENT_REWARD, score_episodes
from ..rollout.driver import episode_driver, episode_seeds, rollout
from ..secrets import redact_text

__all__ = ["evaluate", "evaluate_sets", "pass_at_k"]


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


def _correct(result, name: str, threshold: float) -> list[bool | None]:
    """A NaN, inf or missing score is never a correct answer; None where the reward does not apply."""
    scores = result.raw[name]
    applies = result.applies(name) if hasattr(result, "applies") else [True] * len(scores)
    return [(s is not None and math.isfinite(s) and s >= threshold) if ok else None
            for s, ok in zip(scores, applies)]


def _rows(chunk: list, texts: list[str], result, name: str, threshold: float) -> list[dict]:
    """One row per greedy completion: its prompt's text, the completion, the combined reward (None:
    not scored) and whether the accuracy reward counts it correct (None: does not apply)."""
    correct = _correct(result, name, threshold)
    return [{"prompt": p.text, "completion": text, "reward": float(result.scores[i]) if bool(result.valid[i]) else None,
             "correct": correct[i]} for i, (p, text) in enumerate(zip(chunk, texts))]


def _scored(result, name: str) -> int:
    """How many of the batch's completions reward ``name`` gave a finite score."""
    return sum(result.function_valid(name))


def _ratio(total: float, count: int) -> float | None:
    return round(total / count, 6) if count else None


def _report_failures(result, shown: set[str]) -> None:
    for name, text in result.errors.items():
        if text and name not in shown:
            shown.add(name)
            text = printable(redact_text(text))  # a key quoted by value, the model's control characters
            print(f"steadyrl: during evaluation, reward function {name!r} failed (shown once):\n{text}", flush=True)


def _summary(tally: dict, n: int) -> dict:
    """The reported numbers of a tally (:func:`_tally`), one set's or several sets' together. A number
    nothing measured is None: accuracy when the accuracy reward scored no greedy completion it
    applies to, reward_mean when no completion could be scored, pass@k likewise for the samples."""
    judged = [c for c in tally["correct"] if c is not None]
    out = {"accuracy": _ratio(sum(judged), len(judged) if tally["judged"] else 0),
           "reward_mean": _ratio(tally["rewards"], tally["scored"]), "num_prompts": len(tally["correct"])}
    if n > 0:
        counts = [c for c in tally["counts"] if c is not None]
        for k in _ks(n):
            out[f"pass@{k}"] = _ratio(sum(pass_at_k(n, c, k) for c in counts),
                                      len(counts) if tally["judged_samples"] else 0)
    return out


@torch.no_grad()
def run_eval(config, engine, scorer, prompts: list | dict, device: torch.device, agent=None, *,
             driver=None, completions: list | None = None) -> dict:
    """Evaluate on held-out ``prompts`` with an RNG of its own (training's RNG is untouched, so a
    resumed run reproduces an uninterrupted one); a dict of named sets (``data.eval_sources``) is
    evaluated set by set and overall. ``driver``: the run's episode driver (``RunTask.driver``);
    without it, the one ``agent`` declares (:func:`~steadyrl.rollout.driver.episode_driver`).
    ``completions``: a list that receives one row per held-out prompt's greedy completion
    (``{"set", "prompt", "completion", "reward", "correct"}``; ``steadyrl eval --completions FILE``)."""
    if not prompts:
        return {}
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(config.trainer.seed + 1)
        if isinstance(prompts, dict):
            return evaluate_sets(engine, scorer, prompts, config.eval, config.rollout, agent, driver=driver,
                                 completions=completions)
        return evaluate(engine, scorer, prompts, config.eval, config.rollout, agent, driver=driver,
                        completions=completions)


def evaluate(engine, scorer, prompts: list, eval_config, rollout_config, agent=None, *, driver=None,
             completions: list | None = None) -> dict:
    """Evaluate the engine's model on ``prompts`` (:class:`~steadyrl.data.prompts.PromptItem`):
    whole episodes when there is an ``agent`` (tools or an environment), greedy and sampled."""
    if not prompts:
        return {}
    driver = driver or episode_driver(agent)
    tally = _tally(engine, scorer, prompts, eval_config, rollout_config, driver, completions)
    return _summary(tally, eval_config.num_samples)


@torch.no_grad()
def evaluate_sets(engine, scorer, sets: dict[str, list], eval_config, rollout_config, agent=None, *,
                  driver=None, completions: list | None = None) -> dict:
    """Each named held-out set evaluated on its own (``<set>/<metric>``), and all of them together
    (the plain metric names: counted over every prompt of every set, not averaged over sets)."""
    out, tallies = {}, []
    driver = driver or episode_driver(agent)
    for name, prompts in sets.items():
        if not prompts:
            continue
        rows: list | None = [] if completions is not None else None
        tally = _tally(engine, scorer, prompts, eval_config, rollout_config, driver, rows)
        if completions is not None:
            completions.extend({**row, "set": name} for row in rows)
        tallies.append(tally)
        out.update({f"{name}/{k}": v for k, v in _summary(tally, eval_config.num_samples).items()})
    if not tallies:
        return {}
    whole = {key: ([x for t in tallies for x in t[key]] if isinstance(tallies[0][key], list) else
                   sum(t[key] for t in tallies)) for key in tallies[0]}
    return {**_summary(whole, eval_config.num_samples), **out}


def _tally(engine, scorer, prompts: list, eval_config, rollout_config, driver, completions: list | None = None) -> dict:
    """Per prompt: greedy correctness (None: not applicable) and correct samples of ``num_samples``."""
    max_new = eval_config.max_new_tokens or rollout_config.max_new_tokens
    environment = rollout_config.multi_turn.environment is not None
    names = scorer.names + ([ENVIRONMENT_REWARD] if environment else []) + \
        ([AGENT_REWARD] if rollout_config.multi_turn.agent is not None else [])
    name = eval_config.accuracy_reward or names[0]
    if name not in names:
        raise ValueError(f"eval.accuracy_reward {name!r} is not one of the rewards {names}")

    def episodes(chunk, first: int, n: int, **sampling):
        gen = rollout(engine, engine.tokenizer, driver, chunk, n, rollout_config, max_new_tokens=max_new,
                      seeds=episode_seeds(0, -1, first * n, len(chunk) * n), **sampling)
        result = score_episodes(scorer, [p for p in chunk for _ in range(n)], gen, environment=environment)
        if completions is not None and sampling.get("do_sample") is False:  # the greedy pass: kept as it was
            completions.extend(_rows(chunk, gen.completions, result, name, eval_config.correct_threshold))
        return result

    n = eval_config.num_samples
    # greedy completions of every prompt, then (pass@k) n samples of every prompt
    with progress(len(prompts) * (2 if n > 0 else 1), "eval", is_main_process=dist.is_main()) as bar:
        return _evaluate(episodes, prompts, eval_config, name, bar)


def _evaluate(episodes, prompts: list, eval_config, name: str, bar) -> dict:
    correct, judged, scored, rewards, shown = [], 0, 0, 0.0, set()
    step = eval_config.batch_size
    for start in range(0, len(prompts), step):
        chunk = prompts[start : start + step]
        result = episodes(chunk, start, 1, do_sample=False)
        _report_failures(result, shown)
        correct += _correct(result, name, eval_config.correct_threshold)
        judged += _scored(result, name)
        scored += int(result.valid.sum())
        rewards += float(result.scores[result.valid].sum())
        bar.update(len(chunk))
    n = eval_config.num_samples
    counts, judged_samples = [], 0
    if n > 0:
        per_call = max(1, step // n)
        for start in range(0, len(prompts), per_call):
            chunk = prompts[start : start + per_call]
            result = episodes(chunk, start, n, temperature=eval_config.temperature)
            _report_failures(result, shown)
            ok = _correct(result, name, eval_config.correct_threshold)
            judged_samples += _scored(result, name)
            counts += [None if ok[i * n] is None else sum(ok[i * n : (i + 1) * n]) for i in range(len(chunk))]
            bar.update(len(chunk))
    return {"correct": correct, "judged": judged, "scored": scored, "rewards": rewards, "counts": counts,
            "judged_samples": judged_samples}
