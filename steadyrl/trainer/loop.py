"""``steadyrl train`` and ``steadyrl eval``: the run from config to summary.

    config -> run directory -> build (inputs checked first) -> [resume] -> eval before
    -> for each step: train_step -> log -> checkpoint -> [eval] -> eval after -> summary.json

The run directory holds ``config.yaml`` (the resolved config), ``metrics.jsonl`` (one object a
step), ``samples.jsonl``, ``summary.json`` and ``checkpoints/``; how it is named, locked, marked
and checked is in :mod:`steadyrl.run.directory`. Evaluation draws its samples
from its own seeded RNG, so evaluating never changes what training does (a resumed run
reproduces an uninterrupted one step for step).

Under ``torchrun`` (docs/scaling.md) every rank runs this same loop: the process group starts
here and ends here, rank 0 alone writes files and logs, checkpoints hold full (unsharded)
weights and every rank's RNG state, so they load at any world size and resume exactly at the
same one.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from pathlib import Path

import torch

from .. import distributed as dist
from ..config import config_notes, config_to_dict, load_config
from ..config.loading import read_yaml
from ..config.schema import Config
from ..errors import ConfigError, TrainingHalted, TrainingInterrupted
from ..files import atomic_write_text
from ..models import resolve_device
from ..progress import progress
from ..rewards.loader import absolute_file_spec
from ..rollout import build_engine
from ..secrets import redact_secrets
from ..tracking import Tracker
from ..run import checkpoint as ckpt
from ..run.asynchronous import start_rollouts
from ..run.evaluate import evaluate, evaluate_sets
from ..run.directory import (LOCK, RunLock, check_output_dir, check_resume_matches, check_saved_config, on_main,
                     prepare_output_dir, resolve_output_dir, write_run_config)
from ..build.setup import Run, RunState, build_run, check_inputs, seed_everything
from .step import train_step
from ..run.trust import check_run_code, run_code

def _checkpoint_state(run: Run, shared: dict) -> dict:
    state = dict(vars(run.state))
    state.update({
        "optimizer": shared["optimizer"],
        "critic_optimizer": run.critic_optimizer.state_dict() if run.critic_optimizer else None,
        "scheduler": run.scheduler.state_dict(),
        "rng": shared["rng_ranks"][0],
        "rng_ranks": shared["rng_ranks"],  # every rank's, in rank order
        "running": run.running.state_dict(),
        "kl_controller": run.kl_controller.state_dict(),
        "sampler": run.sampler.state_dict(),
        # the batches in flight, completed, and the rollout worker's RNG (rollout.asynchronous)
        "asynchronous": run.rollouts.state_dict() if run.rollouts is not None else None,
    })
    return state


def _gathered_state(run: Run) -> dict:
    """What only all ranks together hold (a collective: every rank calls it): every rank's RNG
    state and, under FSDP, the full weights and optimizer state."""
    return {"rng_ranks": dist.gather_objects(ckpt.rng_state()),
            "policy": dist.full_model_state_dict(run.policy),
            "optimizer": dist.full_optimizer_state_dict(run.policy, run.optimizer)}


def save(run: Run, step: int) -> Path | None:
    shared = _gathered_state(run)
    if not dist.is_main():
        dist.barrier()
        return None
    path = ckpt.save_checkpoint(run.output_dir / "checkpoints", step, policy=run.policy, tokenizer=run.tokenizer,
                                state=_checkpoint_state(run, shared), critic=run.critic,
                                keep=run.config.trainer.keep_checkpoints, policy_state_dict=shared["policy"])
    dist.barrier()
    return path


def _restore_rng(run: Run, state: dict) -> None:
    """Each rank's own RNG state when the checkpoint has one for it (same world size: exact);
    otherwise rank 0's, re-seeded by rank and step on the other ranks (deterministic, but not
    the stream an uninterrupted run at that world size would have drawn)."""
    ranks = state.get("rng_ranks") or [state["rng"]]
    if dist.rank() < len(ranks):
        ckpt.set_rng_state(ranks[dist.rank()])
    else:
        ckpt.set_rng_state(ranks[0])
        seed_everything(run.config.trainer.seed + dist.rank() + 1_000_003 * run.state.step)


def restore(run: Run, path: Path) -> dict:
    """Load checkpoint ``path`` into the freshly built ``run``; returns its state."""
    state = ckpt.load_state(path)
    if dist.is_fsdp(run.policy):
        dist.load_full_model_state_dict(run.policy, ckpt.read_model_weights(path / "policy"))
    else:
        ckpt.load_model_weights(run.policy, path / "policy")
    if run.critic is not None:
        ckpt.load_model_weights(run.critic.backbone, path / "critic")
        run.critic.value_head.load_state_dict(torch.load(path / "critic" / "value_head.pt", weights_only=True))
        run.critic_optimizer.load_state_dict(state["critic_optimizer"])
    dist.load_full_optimizer_state_dict(run.policy, run.optimizer, state["optimizer"])
    run.scheduler.load_state_dict(state["scheduler"])
    _apply_optim_config(run)
    run.running.load_state_dict(state["running"])
    run.kl_controller.load_state_dict(state["kl_controller"])
    run.sampler.load_state_dict(state["sampler"])
    run.state = RunState(**{k: state[k] for k in vars(RunState()) if k in state})
    _restore_rng(run, state)
    return state


def _apply_optim_config(run: Run) -> None:
    """The config's optimizer settings win over the checkpoint's: ``--resume optim.lr=...`` (the
    way out of a halted run) was silently overridden by the saved learning rate. Only the
    schedule's position (its step count) and the moment estimates come from the checkpoint;
    with an unchanged config this sets the same values the checkpoint held."""
    optim, scheduler = run.config.optim, run.scheduler
    for optimizer, lr in ((run.optimizer, optim.lr), (run.critic_optimizer, optim.critic_lr)):
        for group in optimizer.param_groups if optimizer is not None else []:
            group.update(lr=lr, initial_lr=lr, betas=tuple(optim.betas), eps=optim.eps,
                         weight_decay=optim.weight_decay)
    scheduler.base_lrs = [optim.lr] * len(run.optimizer.param_groups)
    for group, factor in zip(run.optimizer.param_groups, scheduler.lr_lambdas):
        group["lr"] = optim.lr * factor(scheduler.last_epoch)
    scheduler._last_lr = [group["lr"] for group in run.optimizer.param_groups]


def run_eval(config: Config, engine, scorer, prompts: list | dict, device: torch.device, agent=None) -> dict:
    """Evaluate on held-out ``prompts`` with an RNG of its own (training's RNG is untouched); a
    dict of named sets (``data.eval_sources``) is evaluated set by set and overall."""
    if not prompts:
        return {}
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(config.trainer.seed + 1)
        if isinstance(prompts, dict):
            return evaluate_sets(engine, scorer, prompts, config.eval, config.rollout, agent)
        return evaluate(engine, scorer, prompts, config.eval, config.rollout, agent)


def _sample_rows(extras: dict, limit: int = 8) -> list[dict]:
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
    return rows


def _demo_transcript(run: Run, engine, when: str) -> None:
    """The tool demo's greedy episode on its first held-out prompt, printed (``when``: before/after RL)."""
    config = run.config
    if not (config.is_demo and config.demo.task == "tool" and run.eval_prompts and dist.is_main()):
        return
    from ..demo.tool_task import format_transcript
    from ..rollout.driver import rollout

    prompt = run.eval_prompts[0]
    with torch.random.fork_rng(devices=[run.device] if run.device.type == "cuda" else []):
        gen = rollout(engine, run.tokenizer, run.agent, [prompt], 1, config.rollout, do_sample=False)
    episode = gen.episodes[0]
    turns = list(episode.messages) or [{"role": "assistant", "content": gen.completions[0]}]
    text = format_transcript(prompt.messages or prompt.text, turns)
    if episode.truncation:  # its last turn, in the list as sampled, is where it was cut
        text += f"\n  [episode cut by rollout.{episode.truncation}]"
    print(f"held-out transcript {when} RL:\n{text}", flush=True)


SKIP_METRICS = ("actor/loss", "actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "reward/min", "reward/max")
"""What a step with a skipped optimizer step prints (non-finite values print as inf / nan)."""


def _report(run: Run, step: int, metrics: dict, extras: dict, shown: set[str], skipped_before: int) -> None:
    """Say what went wrong in step ``step`` and count it in ``health/warnings``: the first
    traceback of each failing reward function, every skipped optimizer step with its offending
    metrics, the first step with no valid sample (later ones are in ``batch/no_valid_sample``)."""
    notes = []
    for name, text in extras["result"].errors.items():  # rank 0's result holds every rank's errors
        if text and name not in shown:
            shown.add(name)
            notes.append(f"reward function {name!r} failed on some samples (shown once):\n{text}")
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
        for note in notes:
            print(f"steadyrl: {note}", flush=True)


def _count_empty(run: Run, extras: dict) -> None:
    """Steps in a row where no sample of any rank had a valid reward (every one failed a reward
    function): such a step trains on nothing, and a run of them would do so forever."""
    empty = not bool(extras["result"].valid.any())
    run.state.consecutive_empty = run.state.consecutive_empty + 1 if empty else 0


def _halt_if_stuck(run: Run, step: int) -> None:
    limit = run.config.trainer.max_consecutive_skips
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


def train(path: str | None, overrides: list[str], *, output_dir: str | None = None,
          resume: bool = False, overwrite: bool = False) -> dict:
    """Run ``steadyrl train``; returns the summary. ``--resume`` with no config file continues
    with the run's own ``config.yaml`` (plus ``overrides``)."""
    started = time.time()
    if resume and output_dir:  # before the saved config.yaml is read, used or rewritten
        check_saved_config(Path(output_dir))
    if path is None and resume and output_dir and (Path(output_dir) / "config.yaml").is_file():
        path = str(Path(output_dir) / "config.yaml")
        if os.environ.get("RANK", "0") == "0":  # before the process group exists: torchrun's rank
            print(f"resuming with the run's config {path}", flush=True)
    config = load_config(path, overrides)
    if resume and path and output_dir and Path(path) == Path(output_dir) / "config.yaml":
        code = run_code(config, read_yaml(Path(path)))  # the run's own code, run as when it started
        if code and os.environ.get("RANK", "0") == "0":
            print(f"the run's config loads {'; '.join(code)}", flush=True)
    owns_group = dist.init_from_env(use_cuda=resolve_device(config.trainer.device).type == "cuda")
    try:
        return _start(config, output_dir, resume, overwrite, started)
    finally:
        if owns_group:
            dist.teardown()


def _portable(config: Config) -> Config:
    """The config as the run directory keeps it: reward files by absolute path, so that
    ``--resume`` and ``steadyrl eval --output-dir`` work from any directory."""
    rewards = [r.model_copy(update={"name": absolute_file_spec(r.name)}) for r in config.rewards]
    return config.model_copy(update={"rewards": rewards})


def _start(config: Config, output_dir: str | None, resume: bool, overwrite: bool, started: float) -> dict:
    """Check everything, then touch the run directory: a bad input under ``--overwrite`` or
    ``--resume`` leaves the old run (and its ``config.yaml``) as it was. The directory of a
    previous run is locked from the first look at it, a new one from its creation, to the end."""
    fresh = not output_dir  # a new directory of its own: its name is claimed when created
    out = Path(dist.gather_objects(str(resolve_output_dir(config, output_dir)))[0])  # rank 0's time stamp
    with RunLock() as lock:
        ran_here = not fresh and (out / LOCK).is_file() and not (out / LOCK).is_symlink()
        if dist.gather_objects(ran_here)[0]:  # rank 0's view, so all ranks take the same branch
            on_main(lambda: lock.acquire(out))  # a run was here: still running? (else locked when created)
        if not fresh:
            check_output_dir(out, resume, overwrite)
        if resume and ckpt.latest_checkpoint(out / "checkpoints") is not None:
            check_resume_matches(config, out)
        inputs = check_inputs(config)
        try:
            out = prepare_output_dir(out, resume, overwrite, lock, fresh=fresh)
            if dist.is_main():  # one rank repairs a shared directory; the others then see the result
                ckpt.clean_partial(out / "checkpoints")
            dist.barrier()
            latest = ckpt.latest_checkpoint(out / "checkpoints") if resume else None
            if dist.is_main():
                if resume and latest is None:
                    print(f"--resume: no checkpoint in {out / 'checkpoints'}; starting at step 0", flush=True)
                write_run_config(_portable(config), out)
                for note in config_notes(config):
                    print(f"steadyrl: note: {note}", flush=True)
        except BaseException:
            inputs.scorer.close()
            raise
        try:
            run = build_run(config, out, inputs)
            try:
                return _train(run, config, out, latest, started, resume=resume)
            finally:
                run.scorer.close()
                if run.agent is not None:
                    run.agent.shutdown()
        except KeyboardInterrupt:
            raise TrainingInterrupted(resume_hint(config, out)) from None


def resume_hint(config: Config, out: Path) -> str:
    """How to continue an interrupted run: the exact command, and where it will start."""
    command = f"steadyrl train --output-dir {shlex.quote(str(out))} --resume"
    latest = ckpt.latest_checkpoint(out / "checkpoints")
    if latest is None:
        return (f"no checkpoint was saved yet (trainer.save_every = {config.trainer.save_every}); "
                f"`{command}` starts the run again from step 0 with its saved config.yaml")
    return f"to continue from its newest checkpoint ({latest}), run: {command}"


def _train(run: Run, config: Config, out: Path, latest: Path | None, started: float, *,
           resume: bool = False) -> dict:
    saved = None
    if latest is not None:
        saved = restore(run, latest).get("asynchronous")
        if dist.is_main():
            print(f"resumed from {latest} (step {run.state.step})", flush=True)
    start_rollouts(run, saved)  # rollout.asynchronous: None when off
    try:
        return _train_loop(run, config, out, latest, started, resume=resume)
    finally:
        if run.rollouts is not None:
            run.rollouts.close()


def _train_loop(run: Run, config: Config, out: Path, latest: Path | None, started: float, *,
                resume: bool = False) -> dict:
    engine = build_engine(config.rollout.engine, run.generator, run.tokenizer, config.rollout,
                          seed=config.trainer.seed + dist.rank(),
                          max_model_len=config.data.max_prompt_tokens + config.rollout.max_new_tokens,
                          share_prefix=config.trainer.share_prompt_prefix)
    tracker = Tracker(out, config.trainer.trackers, config=redact_secrets(config_to_dict(config)),
                      project=config.trainer.project,
                      run_name=config.trainer.run_name or out.name, is_main_process=dist.is_main(),
                      # --resume with no checkpoint yet starts over: the killed run's lines go
                      resume_step=run.state.step if latest is not None or resume else None)
    def evaluate_now() -> dict:
        return run_eval(config, engine, run.scorer, run.eval_sets or run.eval_prompts, run.device, run.agent)

    shown: set[str] = set()
    elapsed_before = run.state.wall_time_s
    with tracker:
        if run.state.step == 0:
            run.state.eval_before = evaluate_now()
            if run.state.eval_before:
                tracker.log({f"eval/{k}": v for k, v in run.state.eval_before.items()}, 0)
                if dist.is_main():
                    print(f"eval before RL: {json.dumps(run.state.eval_before)}", flush=True)
            _demo_transcript(run, engine, "before")
        bar = progress(run.total_steps, "train", is_main_process=dist.is_main(), initial=run.state.step)
        with bar:
            for step in range(run.state.step + 1, run.total_steps + 1):
                skipped_before = run.state.skipped_steps
                metrics, extras = train_step(run, engine, step)
                run.state.step = step
                _count_empty(run, extras)
                run.state.wall_time_s = elapsed_before + time.time() - started
                _report(run, step, metrics, extras, shown, skipped_before)
                every = config.trainer.samples_every
                if every and step % every == 0:
                    tracker.log_samples(_sample_rows(extras), step)
                if config.trainer.eval_every and step % config.trainer.eval_every == 0 and step < run.total_steps:
                    result = evaluate_now()
                    metrics.update({f"eval/{k}": v for k, v in result.items()})
                    if result and dist.is_main():
                        print(f"eval at step {step}: {json.dumps(result)}", flush=True)
                tracker.log(metrics, step)
                bar.update(1, reward=metrics.get("reward/mean"), len=metrics.get("response/length_mean"),
                           step_s=metrics.get("time/step_s"))
                save_every = config.trainer.save_every
                if (save_every and step % save_every == 0) or step == run.total_steps:
                    save(run, step)
                _halt_if_stuck(run, step)
        eval_after = evaluate_now()
        if eval_after:
            tracker.log({f"eval/{k}": v for k, v in eval_after.items()}, run.state.step)
            if dist.is_main():
                print(f"eval after RL: {json.dumps(eval_after)}", flush=True)
        _demo_transcript(run, engine, "after")
    summary = {
        "steps": run.state.step,
        "wall_time_s": round(elapsed_before + time.time() - started, 2),
        "eval_before": run.state.eval_before or None,
        "eval_after": eval_after or None,
        "skipped_steps": run.state.skipped_steps,
        "dropped_prompts": run.state.dropped_prompts,
        "output_dir": str(out),
    }
    if dist.is_main():
        atomic_write_text(out / "summary.json", json.dumps(summary, indent=2) + "\n")
        print(_summary_line(summary), flush=True)
    return summary


def _percent(value: float | None) -> str:
    """A rate as ``96.6%``; ``n/a`` when it could not be measured (every reward failed)."""
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _summary_line(summary: dict) -> str:
    line = f"done: {summary['steps']} steps in {summary['wall_time_s']:.0f}s"
    before, after = summary["eval_before"], summary["eval_after"]
    if before and after:
        acc = [_percent(before.get("accuracy")), _percent(after.get("accuracy"))]
        line += f"; held-out accuracy {acc[0]} -> {acc[1]}"
        if None not in (before.get("accuracy"), after.get("accuracy")):
            line += f" ({100 * (after['accuracy'] - before['accuracy']):+.1f} points)"
    return line + f"; run directory {summary['output_dir']} (steadyrl plot {summary['output_dir']})"


def evaluate_run(path: str | None, overrides: list[str], *, output_dir: str | None = None,
                 model: str | None = None, trust_run_code: bool = False) -> dict:
    """Run ``steadyrl eval``: a run directory's newest checkpoint, or a model, on held-out prompts.
    The code a run directory's own config names is run only with ``trust_run_code`` (:mod:`steadyrl.run.trust`)."""
    if output_dir is not None:
        run_dir = Path(output_dir)
        saved = run_dir / "config.yaml"
        if path is None and not saved.is_file():
            raise ConfigError(f"--output-dir {output_dir!r} has no config.yaml: is it a steadyrl run directory?")
        if path is None:
            check_saved_config(run_dir)
        latest = ckpt.latest_checkpoint(run_dir / "checkpoints")
        if latest is None:
            raise ConfigError(f"--output-dir {output_dir!r} has no checkpoint to evaluate")
        config = load_config(path or saved, overrides)
        if path is None:
            check_run_code(config, run_dir, trust_run_code)
        model_path = str(latest / "policy")
    else:
        if model is not None:
            overrides = [*overrides, f"model.name_or_path={model}"]
        config = load_config(path, overrides)
        model_path = config.model.name_or_path
        if model_path is None:
            raise ConfigError("steadyrl eval needs --output-dir RUN_DIR, --model PATH, or model.name_or_path")
        if config.is_demo and not config.data.eval_path:
            # the demo's held-out strings are meant for the demo's own model, not for this one
            raise ConfigError(
                f"nothing to evaluate model {model_path!r} on: data.eval_path is not set (without a config, "
                "held-out prompts would be the built-in string-reversal demo's); give a config with "
                "data.eval_path, or data.eval_path=FILE; a demo run is evaluated with --output-dir RUN_DIR")
    from ..build.setup import build_eval

    engine, scorer, prompts, device, agent = build_eval(config, model_path)
    try:
        results = run_eval(config, engine, scorer, prompts, device, agent)
    finally:
        scorer.close()
        if agent is not None:
            agent.shutdown()
    print(json.dumps({"model": model_path, **results}, indent=2))
    return results
