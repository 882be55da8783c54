"""The recipe: ``steadyrl train`` from config to summary, and one RL step, top to bottom.

    config -> run directory (locked; every input checked before it is touched) -> build
    -> resume or start -> eval before
    -> for each step: draw samples (rollout, score, dynamic sampling) -> prepare (old / reference
       log-probs, values) -> gather across ranks -> process rewards -> update -> log / save / eval
    -> eval after -> summary.json

The algorithm is in :func:`train_step`; what surrounds it lives in rooms named for what they hold:
:mod:`steadyrl.assembly` (config -> models, optimizer, task), :mod:`steadyrl.run` (directory,
checkpoints, state, evaluation, reports, the asynchronous worker). One :class:`~contextlib.ExitStack`
owns every resource a run opens — the process group, the directory lock, the reward scorer's and
the agent's workers, the asynchronous rollout worker, the trackers — and closes them in reverse
order however the run ends.

Evaluation draws its samples from its own seeded RNG, so evaluating never changes what training
does (a resumed run reproduces an uninterrupted one step for step). Under ``torchrun``
(docs/scaling.md) every rank runs this same recipe: rank 0 alone writes files and logs,
checkpoints hold full (unsharded) weights and every rank's RNG state.
"""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from . import distributed as dist
from .assembly.setup import Run, build_eval, build_run, check_inputs
from .config import config_to_dict, load_config
from .config.schema import overlong_limit
from .doctor.live import LiveDoctor
from .errors import ConfigError
from .files import atomic_write_text
from .gguf_model import model_source
from .models import resolve_device
from .progress import progress, train_fields
from .rollout import build_engine
from .rollout.base import Engine
from .rollout.hf import engine_sync_metrics
from .run import checkpoint as ckpt
from .run.asynchronous import start_rollouts
from .run.directory import RunLock, check_completions_path, check_saved_config
from .run.evaluate import run_eval
from .run.export import find_checkpoint, write_final
from .run.preemption import SigtermStop
from .run.report import count_empty, halt_if_stuck, log_eval, report_step, sample_rows, write_summary
from .run.start import claim_run_dir, load_run_config, prepare_run_dir, resume_hint_on_interrupt
from .run.state import restore, save
from .run.trust import check_run_code
from .run.warnings_once import warnings_once
from .secrets import redact_secrets
from .tracking import Tracker
from .trainer.batch import batch_from_generation
from .trainer.dynamic import step_samples
from .trainer.global_batch import gather_samples
from .trainer.processing import RewardInputs, RewardSettings, process_rewards, reward_components
from .trainer.mismatch import importance_correction, worst_tokens
from .trainer.step import domain_ids, prepare, step_metrics
from .trainer.turn_samples import episode_view, expand_turn_samples, needs_turn_samples
from .trainer.update import ppo_update


def train(path: str | None, overrides: list[str], *, output_dir: str | None = None,
          resume: bool = False, overwrite: bool = False, trust_run_code: bool = False) -> dict:
    """Run ``steadyrl train``; returns the summary. ``--resume`` with no config file continues
    with the run's own ``config.yaml`` (plus ``overrides``); the code it names runs when the run is
    recorded as this user's own, or with ``trust_run_code`` (:mod:`steadyrl.run.trust`)."""
    started = time.time()
    config = load_run_config(path, overrides, output_dir=output_dir, resume=resume, trust_run_code=trust_run_code)
    with ExitStack() as resources:  # closed in reverse order, however the run ends
        if dist.init_from_env(use_cuda=resolve_device(config.trainer.device).type == "cuda"):
            resources.callback(dist.teardown)  # the process group this run started
        lock = resources.enter_context(RunLock())
        warned = resources.enter_context(warnings_once())  # each distinct warning printed once
        out = claim_run_dir(config, output_dir, resume, overwrite, lock)
        inputs = check_inputs(config, resources)  # data, rewards, models: checked before the directory changes
        out, latest = prepare_run_dir(config, out, resume, overwrite, lock, fresh=not output_dir)
        resources.enter_context(resume_hint_on_interrupt(config, out))  # Ctrl-C: how to continue
        sigterm = resources.enter_context(SigtermStop())  # SIGTERM: Ctrl-C, after saving the step it is on

        # --- build, then resume or start
        run = build_run(config, out, inputs)
        saved = None
        if latest is not None:
            saved = restore(run, latest).get("asynchronous")
            if dist.is_main():
                print(f"resumed from {latest} (step {run.state.step})", flush=True)
        run.rollouts = start_rollouts(run, saved)  # rollout.asynchronous: None when off
        if run.rollouts is not None:
            resources.callback(run.rollouts.close)
        engine = build_engine(config.rollout.engine, run.models.generator, run.models.tokenizer, config.rollout,
                              seed=config.trainer.seed + dist.rank(),
                              max_model_len=config.data.max_prompt_tokens + config.rollout.max_new_tokens,
                              share_prefix=config.trainer.share_prompt_prefix)
        tracker = resources.enter_context(Tracker(
            out, config.trainer.trackers, config=redact_secrets(config_to_dict(config)),
            project=config.trainer.project, run_name=config.trainer.run_name or out.name,
            is_main_process=dist.is_main(),
            # --resume with no checkpoint yet starts over: the killed run's lines go
            resume_step=run.state.step if latest is not None or resume else None))

        def evaluate_now() -> dict:
            task = run.task
            return run_eval(config, engine, task.scorer, task.eval_sets or task.eval_prompts, run.device,
                            driver=task.driver)

        if run.state.step == 0:
            run.state.eval_before = evaluate_now()
            log_eval(tracker, run.state.eval_before, 0, "before RL")
            run.task.show(engine, "before")

        # --- the loop: one step, then what is logged, saved and evaluated after it
        t = config.trainer
        doctor = LiveDoctor(out, config_to_dict(config), every=t.doctor_every, halt_on=t.halt_on,
                            thresholds=t.doctor_thresholds, upto_step=run.state.step)  # docs/stability.md
        shown: set[str] = set()
        elapsed_before = run.state.wall_time_s
        with progress(run.total_steps, "train", is_main_process=dist.is_main(), initial=run.state.step) as bar, \
                sigterm.deferred():
            for step in range(run.state.step + 1, run.total_steps + 1):
                skipped_before = run.state.skipped_steps
                metrics, extras = train_step(run, engine, step)
                run.state.step = step
                count_empty(run, extras)
                run.state.wall_time_s = elapsed_before + time.time() - started
                run.state.warnings += warned.take(run.state.warned)  # counted in health/warnings by report_step
                report_step(run, step, metrics, extras, shown, skipped_before)
                if t.samples_every and step % t.samples_every == 0:
                    tracker.log_samples(sample_rows(extras), step)
                if t.eval_every and step % t.eval_every == 0 and step < run.total_steps:
                    result = evaluate_now()
                    metrics.update({f"eval/{k}": v for k, v in result.items()})
                    if result and dist.is_main():
                        print(f"eval at step {step}: {json.dumps(result)}", flush=True)
                doctor.check(step, metrics)  # one line per detector that fires first; health/doctor_findings
                tracker.log(metrics, step)
                bar.update(1, **train_fields(metrics, config.teacher), step_s=metrics.get("time/step_s"))
                if (t.save_every and step % t.save_every == 0) or step == run.total_steps:
                    save(run, step)
                halt_if_stuck(run, step)  # trainer.max_consecutive_skips steps with nothing learned
                doctor.halt_if_asked(step, lambda s: save(run, s))  # trainer.halt_on
                sigterm.save_if_asked(step, lambda s: save(run, s))  # preempted: saved, then stopped

        # --- the end: eval after, summary
        eval_after = evaluate_now()
        log_eval(tracker, eval_after, run.state.step, "after RL")
        run.task.show(engine, "after")
        final = write_final(config, out) if dist.is_main() else None  # the policy as a plain HF directory
        doctor.finish()  # report.md: the run's triage
        return write_summary(run, eval_after, elapsed_before + time.time() - started, final)


def train_step(run: Run, engine: Engine, step: int) -> tuple[dict[str, float], dict]:
    """Run step ``step``; returns ``(metrics, extras)`` where extras carry samples and tracebacks."""
    cfg = run.config
    ro, algo = cfg.rollout, cfg.algorithm
    times = {"start": time.perf_counter()}

    # 1. draw: this rank's prompts, rolled out and scored (several draws with dynamic sampling)
    drawn = step_samples(run, engine, step)
    times["scored"] = time.perf_counter()
    episodes, group_size, slots = drawn, ro.group_size, 1
    if needs_turn_samples(run.task.agent, drawn):  # each turn (gateway: each trajectory) a sample of its own
        drawn, slots = expand_turn_samples(episodes, run.models.tokenizer)
        group_size *= slots

    # 2. prepare: the rollout policy's and the reference's log-probs, the critic's values
    batch = prepare(cfg, run.models, run.device, run.optim.kl_controller.value, batch_from_generation(drawn.gen))

    # 3. gather: reward processing sees the samples of all ranks
    whole = gather_samples(drawn.result, drawn.gen, batch, [len(p.ids) for p in drawn.prompts],
                           ro.multi_turn.turn_reward, drawn.selected)

    # 4. process rewards: clip, normalise, KL in the reward, advantages; then importance correction
    trainable = whole.result.valid if whole.selected is None else whole.result.valid & whole.selected
    inputs = RewardInputs(whole.result.scores, trainable, whole.policy_mask, whole.truncated, group_size,
                          old_logprobs=whole.old_logprobs, ref_logprobs=whole.ref_logprobs, values=whole.values,
                          teacher_logprobs=whole.teacher_logprobs, turn_rewards=whole.turn_rewards,
                          domains=domain_ids(whole.result.domains), episode_size=slots,
                          components=reward_components(whole.result), episode_lengths=whole.response_mask.sum(-1))
    settings = RewardSettings(kl_coef=run.optim.kl_controller.value, running=run.optim.running,
                              overlong_limit=overlong_limit(cfg), distill_coef=cfg.teacher.distill_coef,
                              task_rewards=cfg.teacher.task_rewards)
    processed = process_rewards(inputs, algo, settings)
    advantages, loss_mask, tis_metrics = importance_correction(ro, whole, processed.advantages,
                                                             processed.loss_mask)
    batch = replace(batch, loss_mask=whole.mine(loss_mask), advantages=whole.mine(advantages),
                    returns=whole.mine(processed.returns), sample_weights=whole.mine(processed.sample_weights))

    # 5. update: PPO epochs over mini-batches (policy and critic), then the schedule and the KL controller
    lr = run.optim.scheduler.get_last_lr()[0]
    metrics: dict[str, float] = {}
    if loss_mask.sum() > 0:  # the global mask: every rank takes the same branch
        policy, critic = run.models.training_models()
        update_metrics, steps, skipped = ppo_update(policy, run.optim.optimizer, batch, cfg,
                                                    kl_coef=run.optim.kl_controller.value, critic=critic,
                                                    critic_optimizer=run.optim.critic_optimizer, device=run.device)
        metrics.update(update_metrics)
        engine.update_weights(run.models.generator)  # vLLM: pushed before the next generation
        metrics.update(engine_sync_metrics(engine))  # rollout.dtype's copy: refreshed exactly? (docs/precision.md)
    else:  # no sample may enter the loss: nothing to learn from, nothing is touched
        steps = skipped = 0
        metrics["batch/no_valid_sample"] = 1.0
    run.optim.scheduler.step()  # counts training steps, skipped ones included (run/warnings_once.py)
    if run.rollouts is not None:  # the next requests are generated from this step's weights
        run.rollouts.push(step)
    kl_now = metrics.get(f"kl/{algo.kl_estimator}")
    if kl_now is not None:
        run.optim.kl_controller.update(kl_now, n_steps=len(batch) * dist.world_size(), step=step)
    times["updated"] = time.perf_counter()

    # 6. bookkeeping: the counters a checkpoint carries, the step's metrics
    run.state.skipped_steps += skipped
    # skipped optimizer steps in a row (trainer.max_consecutive_skips); one that went through resets it
    run.state.consecutive_skips = run.state.consecutive_skips + skipped if skipped == steps else 0
    if episodes is not drawn:  # reward and episode metrics per episode, not per turn sample
        whole = episode_view(whole, episodes)
    metrics.update(step_metrics(run, drawn, whole, processed, tis_metrics, lr, times))
    # samples.jsonl: each sample's worst-disagreeing tokens (not for step-wise rows: they are turns)
    mismatch = None
    if episodes is drawn and not ro.correction.bypass:
        mask = batch.response_mask if batch.policy_mask is None else batch.policy_mask
        mismatch = worst_tokens(batch.old_logprobs, batch.rollout_logprobs, mask, batch.response_ids)
    # samples: this rank's own; result: all ranks' (rank 0's rows first, so they line up on rank 0)
    extras = {"prompts": episodes.samples, "completions": episodes.gen.completions, "result": whole.result,
              "episodes": episodes.gen.episodes, "decode": run.models.tokenizer.decode, "mismatch_tokens": mismatch}
    return metrics, extras


def evaluate_run(path: str | None, overrides: list[str], *, output_dir: str | None = None,
                 model: str | None = None, trust_run_code: bool = False, step: int | None = None,
                 completions_path: str | None = None) -> dict:
    """Run ``steadyrl eval``: a run directory's newest checkpoint, or a model, on held-out prompts.
    The code a run directory's own config names is run only with ``trust_run_code`` (:mod:`steadyrl.run.trust`).
    ``completions_path``: a JSONL file that receives each held-out prompt's greedy completion."""
    if completions_path is not None:
        check_completions_path(completions_path, path)
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
        if step is not None:  # an older checkpoint (--step N): one of those kept, or an error naming them
            latest = find_checkpoint(run_dir, step)
        config = load_config(path or saved, overrides)
        if path is None:
            check_run_code(config, run_dir, trust_run_code)
        model_path = str(latest / "policy")
    else:
        if model is not None:
            overrides = [*overrides, f"model.name_or_path={model}"]
        config = load_config(path, overrides)
        model_path = model_source(config)
        if model_path is None:
            raise ConfigError("steadyrl eval needs --output-dir RUN_DIR, --model PATH, or model.name_or_path")
    with ExitStack() as resources:
        resources.enter_context(warnings_once())
        engine, scorer, prompts, device, driver = build_eval(config, model_path, resources,
                                                             of_run_dir=output_dir is not None)
        rows: list | None = [] if completions_path is not None else None
        results = run_eval(config, engine, scorer, prompts, device, driver=driver, completions=rows)
    if completions_path is not None:  # the model's text stays in the file (JSON-escaped), not on the console
        atomic_write_text(completions_path, "".join(json.dumps(r) + "\n" for r in rows))
    print(json.dumps({"model": model_path, **results, **({"completions": completions_path} if rows is not None
                                                         else {})}, indent=2))
    return results
