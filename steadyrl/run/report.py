"""What a run says: a step's problems, its sample rows, the resume command, the closing summary.

* :func:`report_step` prints the first traceback of each failing reward function, every skipped
  optimizer step and the first step with no valid sample, and counts them in ``health/warnings``;
* :func:`count_empty` and :func:`halt_if_stuck` stop a run that trains on nothing
  (``trainer.max_consecutive_skips``), with its state saved;
* :func:`log_eval` logs and prints an evaluation; :func:`write_summary` writes ``summary.json``
  and prints the closing line; :func:`resume_hint` says how to continue an interrupted run.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from .. import distributed as dist
from ..config.schema import Config
from ..errors import TrainingHalted
from ..files import atomic_write_text
from ..printable import printable
from ..secrets import redact_text
from . import checkpoint as ckpt
from .state import save

if TYPE_CHECKING:
    from ..trainer.parts import Run


def sample_rows(extras: dict, limit: int = 8) -> list[dict]:
    result = extras["result"]
    rows = []
    for i, (prompt, completion) in enumerate(zip(extras["prompts"][:limit], extras["completions"][:limit])):
        row = {"prompt": prompt.text, "completion": completion,
               "reward": float(result.scores[i]) if bool(result.valid[i]) else None}
        row.update({f"reward/{name}": scores[i] for name, scores in result.raw.items()})
        episodes = extras.get("episodes")
        if episodes:  # the transcript turn by turn: assistant turns, tool results, observations
            row.update(turns=episodes[i].messages, truncated_by=episodes[i].truncation)
        rows.append(row)
    worst = extras.get("mismatch_tokens")
    if worst is not None:  # the engine's log-probs came back: each sample's worst-disagreeing tokens
        from ..trainer.mismatch import worst_token_rows

        for row, tokens in zip(rows, worst_token_rows(worst, extras["decode"], len(rows))):
            row["mismatch_tokens"] = tokens
    return rows


_FAILING = {"agent": "the agent (rollout.multi_turn.agent) failed on some episodes",
            "environment": "the environment (rollout.multi_turn.environment) failed on some episodes"}
"""How a failure of the scores' non-function parts is introduced (the names of
:data:`steadyrl.rewards.scorer.AGENT_REWARD` and ``ENVIRONMENT_REWARD``)."""


SKIP_METRICS = ("actor/loss", "actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "reward/min", "reward/max")
"""What a step with a skipped optimizer step prints (non-finite values print as inf / nan)."""


def report_step(run: Run, step: int, metrics: dict, extras: dict, shown: set[str], skipped_before: int) -> None:
    """Say what went wrong in step ``step`` and count it in ``health/warnings``: the first
    traceback of each failing reward function, every skipped optimizer step with its offending
    metrics, the first step with no valid sample (later ones are in ``batch/no_valid_sample``)."""
    notes = []
    for name, text in extras["result"].errors.items():  # rank 0's result holds every rank's errors
        if text and name not in shown:
            shown.add(name)
            what = _FAILING.get(name, f"reward function {name!r} failed on some samples")
            cause = gateway_cause(extras.get("episodes")) if name == "agent" else None
            what += f": {cause}" if cause else ""
            notes.append(f"{what} (shown once):\n{text}")
    skipped = run.state.skipped_steps - skipped_before
    if skipped:
        offending = ", ".join(f"{k}={metrics[k]:.4g}" for k in SKIP_METRICS if k in metrics)
        notes.append(f"step {step}: skipped {skipped} optimizer step(s) with a non-finite loss or gradient "
                     f"norm ({offending}); the weights are unchanged")
    if metrics.get("batch/no_valid_sample") and "batch/no_valid_sample" not in shown:
        shown.add("batch/no_valid_sample")
        notes.append(f"step {step}: no sample could enter the loss (reward/valid_frac = "
                     f"{metrics.get('reward/valid_frac', 0):.3g}); nothing was trained on this step "
                     "(shown once; batch/no_valid_sample marks such steps)")
    run.state.warnings += len(notes)
    metrics["health/warnings"] = run.state.warnings
    if dist.is_main():
        for note in notes:  # a traceback may quote a key (by value) or the model's text (control characters)
            print(f"steadyrl: {printable(redact_text(note))}", flush=True)


def gateway_cause(episodes) -> str | None:
    """``"35 of 35 episodes ended because ... (HTTP 503 x35)"`` when agents raised because their calls
    to the gateway failed (:func:`steadyrl.gateway.agent.call_failure`); None when none did."""
    failures = [e.call_failure for e in episodes or () if e.call_failure]
    if not failures:
        return None
    kinds = ", ".join(f"{kind} x{n}" for kind, n in Counter(failures).most_common(3))
    return (f"{len(failures)} of {len(episodes)} episodes ended because the agent's calls to the gateway were refused "
            f"or failed ({kinds})")


def count_empty(run: Run, extras: dict) -> None:
    """Steps in a row where no sample of any rank had a valid reward (every one failed a reward
    function, or its agent's calls to the gateway failed: ``empty_cause``, set only when every
    episode's did; when some reached the reward functions and failed there, those are to blame too):
    such a step trains on nothing, and a run of them would do so forever."""
    empty = not bool(extras["result"].valid.any())
    run.state.consecutive_empty = run.state.consecutive_empty + 1 if empty else 0
    episodes = extras.get("episodes") or ()
    every = empty and bool(episodes) and all(e.call_failure for e in episodes)
    run.state.empty_cause = gateway_cause(episodes) if every else None


def halt_if_stuck(run: Run, step: int) -> None:
    limit = run.config.trainer.max_consecutive_skips
    if run.state.consecutive_empty >= limit and run.state.empty_cause:
        path = save(run, step)
        raise TrainingHalted(
            f"{limit} steps in a row had no sample with a valid reward (last at step {step}): the gateway refused "
            f"or failed the agent's calls ({run.state.empty_cause}), so those episodes never reached the reward "
            "functions. HTTP 503 means the gateway had no free connection (another local process holding its "
            "connections, or an agent opening more than rollout.multi_turn.agent_concurrency needs); connection "
            "errors mean "
            "it closed or dropped them. The first agent traceback is printed above; rollout/agent/gateway_errors "
            f"counts them. The state is saved in {path}. See the gateway's limits in docs/environments.md, then "
            "--resume.")
    if run.state.consecutive_empty >= limit:
        path = save(run, step)
        raise TrainingHalted(
            f"{limit} steps in a row had no sample with a valid reward (last at step {step}): every sample "
            "failed a reward function (the first traceback of each is printed above; reward/<name>/failed "
            f"says which), so nothing was trained on them. The state is saved in {path}. Fix the reward "
            "function or the data, then --resume; see docs/troubleshooting.md.")
    if run.state.consecutive_skips >= limit:
        path = save(run, step)
        raise TrainingHalted(
            f"{limit} optimizer steps in a row had a non-finite loss or gradient norm (last at step "
            f"{step}); no NaN reached the weights. The last good state is saved in {path}. See "
            "docs/troubleshooting.md (lower optim.lr, set algorithm.reward_clip / advantage_clip).")


def resume_hint(config: Config, out: Path) -> str:
    """How to continue an interrupted run: the exact command, and where it will start."""
    command = f"steadyrl train --output-dir {shlex.quote(str(out))} --resume"
    latest = ckpt.latest_checkpoint(out / "checkpoints")
    if latest is None:
        return (f"no checkpoint was saved yet (trainer.save_every = {config.trainer.save_every}); "
                f"`{command}` starts the run again from step 0 with its saved config.yaml")
    return f"to continue from its newest checkpoint ({latest}), run: {command}"


def _percent(value: float | None) -> str:
    """A rate as ``96.6%``; ``n/a`` when it could not be measured (every reward failed)."""
    return "n/a" if value is None else f"{100 * value:.1f}%"


def summary_line(summary: dict) -> str:
    line = f"done: {summary['steps']} steps in {summary['wall_time_s']:.0f}s"
    before, after = summary["eval_before"], summary["eval_after"]
    if before and after:
        acc = [_percent(before.get("accuracy")), _percent(after.get("accuracy"))]
        line += f"; held-out accuracy {acc[0]} -> {acc[1]}"
        if None not in (before.get("accuracy"), after.get("accuracy")):
            line += f" ({100 * (after['accuracy'] - before['accuracy']):+.1f} points)"
    if summary.get("final_model"):
        line += f"; final model {summary['final_model']}"
    return line + f"; run directory {summary['output_dir']} (steadyrl plot {summary['output_dir']})"


def log_eval(tracker, results: dict, step: int, when: str) -> None:
    """An evaluation's results as ``eval/*`` metrics of ``step``, and printed (``when``: before RL...)."""
    if not results:
        return
    tracker.log({f"eval/{k}": v for k, v in results.items()}, step)
    if dist.is_main():
        print(f"eval {when}: {json.dumps(results)}", flush=True)


def write_summary(run: Run, eval_after: dict, wall_time_s: float, final: Path | None = None) -> dict:
    """``summary.json`` (rank 0 writes it) and the closing line; returns the summary. ``final``:
    the trained policy as a plain HF directory (run/export.py)."""
    summary = {
        "steps": run.state.step,
        "wall_time_s": round(wall_time_s, 2),
        "eval_before": run.state.eval_before or None,
        "eval_after": eval_after or None,
        "skipped_steps": run.state.skipped_steps,
        "dropped_prompts": run.state.dropped_prompts,
        "output_dir": str(run.output_dir),
        "final_model": str(final) if final is not None else None,
    }
    if dist.is_main():
        atomic_write_text(run.output_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
        print(summary_line(summary), flush=True)
    return summary
