"""End to end: GRPO on the demo task, steadyrl vs TRL's ``GRPOTrainer`` with the same settings.

    python -m benchmarks.bench_trl                       # 3 paired runs of 150 steps each (~12 min)
    python -m benchmarks.bench_trl --quick               # smoke run: one pair of 12 steps
    python -m benchmarks.bench_trl --write-md BENCHMARKS.md

The model is the demo's: character tokenizer, 2-layer Llama (hidden 128), warm-started with the
demo's supervised defaults (``DemoConfig``) and saved to a temporary directory that both trainers
load. The prompts are the demo's training split (4,000 strings to reverse), the reward is
``steadyrl.demo.reverse_reward`` (TRL's reward signature), and each run is one fresh process:

* ``steadyrl``: :func:`steadyrl.recipe.train` on a config file written here;
* ``trl``: ``GRPOTrainer`` with a ``GRPOConfig`` that makes one step the same work.

Settings made equal (steadyrl = TRL ``GRPOConfig``):

* batch: ``rollout.prompts_per_step`` P x ``group_size`` G = ``per_device_train_batch_size`` P*G,
  ``num_generations`` G, ``steps_per_generation`` 1, ``gradient_accumulation_steps`` 1;
* completions: ``max_new_tokens`` = ``max_completion_length``; temperature 1.0, top-p 1.0, top-k off
  in both, ``repetition_penalty`` 1.0;
* advantage: ``grpo`` with ``norm_by_std`` (unbiased group std) = ``scale_rewards="group"`` (unbiased);
* loss: ``ppo`` clip 0.2, ``token-mean`` over the whole batch = ``epsilon`` 0.2, ``loss_type="dapo"``,
  ``importance_sampling_level="token"``; no entropy bonus in either;
* no KL, no reference model: ``kl_mode: none`` = ``beta`` 0.0;
* one update per batch: ``ppo_epochs`` 1, one mini-batch, ``micro_batch_size`` P*G = ``num_iterations`` 1;
* truncated completions stay in the loss: ``mask_truncated: false`` = ``mask_truncated_completions=False``;
* AdamW, lr, betas (0.9, 0.999), eps 1e-8, no weight decay, grad-norm clip 1.0, constant schedule =
  ``optim="adamw_torch"``, the same values, ``lr_scheduler_type="constant"`` (TRL's default is linear);
* no activation checkpointing (steadyrl's default) = ``gradient_checkpointing=False`` (TRL's default is on);
* float32 on the CPU, ``trainer.num_threads`` = ``use_cpu``, ``bf16=False``, ``torch.set_num_threads``;
* dropout off (the model has none; ``disable_dropout=True``); metrics logged every step
  (``logging_steps=1``); no checkpoint during the run (``save_every: 0`` = ``save_strategy="no"``).

Not aligned (no setting in one or the other): the advantage epsilon (steadyrl
``(s - mean) / (std + 1e-6)``, TRL ``1e-4``; on 0/1 rewards a non-zero group std is >= 0.35, so
the advantages differ by < 0.03%); the data order and the sampling RNG streams (same seed, different
samplers: the runs learn alike but not sample for sample); steadyrl's reward function runs in a
worker process (its default isolation, with a time limit), TRL's in the trainer's process; and
steadyrl computes log-probs from hidden states in chunks (its default) where TRL builds the logits.

Measured per step, the same way for both: the wall time between the ends of consecutive steps
(everything the loop does: generation, reward, update, logging), the process's CPU time over the
same interval (steadier than the wall clock on a shared machine), and the tokens the step
processed, prompt + completion (up to and including EOS) over every sample: steadyrl's
``prompt_mask.sum() + response_mask.sum()``, TRL's increment of ``state.num_input_tokens_seen``
(the same count). Reported: the median over the steps after ``--warmup`` of seconds per step
and tokens per second, wall and CPU, the mean reward of the first 10 and of the last ``--last`` steps, and the
greedy exact-match accuracy of the final policy on the demo's 500 held-out strings (the same
function for both). Runs alternate steadyrl / TRL, each pair with its own seed; the ratio is
taken pair by pair.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from .common import emit, machine, median_of, pair_defaults, pair_parser, publish, run_pairs, run_steadyrl

FRAMEWORKS = ("steadyrl", "trl")
SEED = 42  # the demo's seed: model initialisation, warm start, splits


# --- the shared inputs: a warm-started demo model, the prompts ----------------------------------------


def prepare(model_dir: Path) -> dict:
    """Build, warm-start and save the demo model with its tokenizer, and the prompt files, into
    ``model_dir`` (kept when already there). Returns ``{"warmstart": ..., "heldout_before": ...}``."""
    info_path = model_dir / "bench_info.json"
    if info_path.is_file():
        return json.loads(info_path.read_text())
    import torch

    from steadyrl.config.schema import DemoConfig
    from steadyrl.demo import build_char_tokenizer, build_tiny_model, exact_match_accuracy, make_splits, warm_start
    from steadyrl.demo.task import VOCAB_CHARS

    torch.manual_seed(SEED)
    demo = DemoConfig()
    train, held_out = make_splits(demo.num_train, demo.num_eval, min_len=demo.min_len, max_len=demo.max_len,
                                  seed=SEED)
    tokenizer = build_char_tokenizer(VOCAB_CHARS)
    model = build_tiny_model(tokenizer, n_layers=demo.n_layers, hidden_size=demo.hidden_size,
                             n_heads=demo.n_heads, seed=SEED)
    ws = warm_start(model, tokenizer, train, steps=demo.warmstart_steps, lr=demo.warmstart_lr,
                    batch_size=demo.warmstart_batch_size, seed=SEED)
    model_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    for name, records in (("train.jsonl", train), ("heldout.jsonl", held_out)):
        (model_dir / name).write_text("".join(json.dumps(r) + "\n" for r in records))
    info = {"vocab": len(tokenizer), "warmstart_steps": ws["steps"],
            "warmstart_loss": [ws["losses"][0], ws["losses"][-1]],
            "heldout_before": exact_match_accuracy(model, tokenizer, held_out, max_new_tokens=demo.max_len + 2)}
    info_path.write_text(json.dumps(info))
    return info


def _records(model_dir: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (model_dir / name).read_text().splitlines() if line.strip()]


def _heldout_accuracy(model, tokenizer, model_dir: Path, max_new_tokens: int) -> float:
    from steadyrl.demo import exact_match_accuracy

    return exact_match_accuracy(model, tokenizer, _records(model_dir, "heldout.jsonl"), max_new_tokens)


# --- the children: one framework, one run --------------------------------------------------------------


def _steadyrl_config(args, out: Path) -> Path:
    reward = {"name": "steadyrl.demo:reverse_reward",
              **({"isolation": args.reward_isolation} if args.reward_isolation else {})}
    return matched_config(args, args.model_dir, reward, out)


def matched_config(args, model_dir: Path, reward: dict, out: Path) -> Path:
    """steadyrl's config for its side of a pair, matching :func:`run_trl`'s settings (the module
    docstring's table), written to ``out``; shared by the benchmarks that pair steadyrl with TRL."""
    batch = args.prompts * args.group
    config = {
        "model": {"name_or_path": str(model_dir), "dtype": "float32"},
        "data": {"train_path": str(args.model_dir / "train.jsonl"), "shuffle": True},
        "rewards": [reward],
        "rollout": {"prompts_per_step": args.prompts, "group_size": args.group, "max_new_tokens": args.max_new_tokens,
                    "temperature": 1.0, "top_p": 1.0, "top_k": 0},
        "algorithm": {"preset": "grpo", "advantage_estimator": "grpo", "norm_by_std": True, "policy_loss": "ppo",
                      "pg_clip": 0.2, "loss_agg_mode": "token-mean", "kl_mode": "none", "mask_truncated": False,
                      "entropy_coef": 0.0},
        "optim": {"lr": args.lr, "schedule": "constant", "warmup_steps": 0, "weight_decay": 0.0,
                  "betas": [0.9, 0.999], "eps": 1e-8, "max_grad_norm": 1.0},
        "trainer": {"max_steps": args.steps, "seed": args.seed, "ppo_epochs": 1, "mini_batch_size": None,
                    "micro_batch_size": batch, "save_every": 0, "samples_every": 0, "num_threads": args.threads,
                    "device": "cpu"},
    }
    path = out / "bench_config.yaml"
    path.write_text(json.dumps(config, indent=1))  # JSON is YAML
    return path


def child_steadyrl(args) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_trl_steadyrl_") as tmp:
        steps, run = run_steadyrl(_steadyrl_config(args, Path(tmp)), Path(tmp) / "run")
        acc = _heldout_accuracy(run.models.policy, run.models.tokenizer, args.model_dir, args.max_new_tokens)
    return {"steps": steps, "heldout_after": acc}


def child_trl(args) -> dict:
    from steadyrl.demo import reverse_reward

    return run_trl(args, str(args.model_dir), reverse_reward, _records(args.model_dir, "train.jsonl"),
                   lambda model, tokenizer: _heldout_accuracy(model, tokenizer, args.model_dir, args.max_new_tokens))


def run_trl(args, model_dir: str, reward, rows: list[dict], heldout) -> dict:
    """TRL's GRPOTrainer on ``model_dir`` with the settings steadyrl's side of the pair uses (the
    table in the module docstring): per-step times, CPU and tokens, and ``heldout(model, tokenizer)``
    after training. Shared by the benchmarks that pair steadyrl with TRL."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(args.threads)
    steps: list[dict] = []

    class StepTimer(TrainerCallback):
        def on_step_end(self, a, state, control, **kw):
            before = steps[-1]["seen"] if steps else 0
            steps.append({"end": time.perf_counter(), "cpu": time.process_time(),
                          "seen": state.num_input_tokens_seen, "tokens": state.num_input_tokens_seen - before})

        def on_log(self, a, state, control, logs=None, **kw):
            if logs and "reward" in logs and steps:
                steps[-1]["reward"] = logs["reward"]
                steps[-1]["length"] = logs.get("completions/mean_length")

    batch = args.prompts * args.group
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    with tempfile.TemporaryDirectory(prefix="bench_trl_trl_") as tmp:
        config = GRPOConfig(
            output_dir=tmp, use_cpu=True, bf16=False, fp16=False, seed=args.seed, max_steps=args.steps,
            per_device_train_batch_size=batch, gradient_accumulation_steps=1, steps_per_generation=1,
            num_generations=args.group, max_completion_length=args.max_new_tokens,
            temperature=1.0, top_p=1.0, top_k=0, repetition_penalty=1.0,
            learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
            adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, optim="adamw_torch", max_grad_norm=1.0,
            beta=0.0, epsilon=0.2, num_iterations=1, loss_type="dapo", scale_rewards="group",
            importance_sampling_level="token", mask_truncated_completions=False, disable_dropout=True,
            gradient_checkpointing=False, shuffle_dataset=True,
            logging_steps=1, save_strategy="no", eval_strategy="no", report_to="none",
            dataloader_num_workers=0, disable_tqdm=True,
        )
        trainer = GRPOTrainer(model=model_dir, reward_funcs=reward, args=config,
                              train_dataset=Dataset.from_list(rows), processing_class=tokenizer, callbacks=[StepTimer()])
        assert next(trainer.model.parameters()).dtype == torch.float32
        trainer.train()
        acc = heldout(trainer.model, tokenizer)
    return {"steps": steps, "heldout_after": acc}


def summarize(result: dict, warmup: int, last: int) -> dict:
    """Per-run figures from the per-step records."""
    steps = result["steps"]
    timed = [(s, s["end"] - steps[i - 1]["end"], s["cpu"] - steps[i - 1]["cpu"])
             for i, s in enumerate(steps) if i >= max(warmup, 1)]
    rewards = [s.get("reward") for s in steps if s.get("reward") is not None]
    out = {
        "timed_steps": len(timed),
        "s_per_step": statistics.median(dt for _, dt, _ in timed),
        "tokens_per_s": statistics.median(s["tokens"] / dt for s, dt, _ in timed),
        "cpu_s_per_step": statistics.median(c for _, _, c in timed),
        "tokens_per_cpu_s": statistics.median(s["tokens"] / c for s, _, c in timed),
        "tokens_per_step": statistics.mean(s["tokens"] for s, _, _ in timed),
        "length": statistics.mean(s["length"] for s in steps if s.get("length") is not None),
        "reward_first": statistics.mean(rewards[:10]),
        "reward_last": statistics.mean(rewards[-last:]),
        "heldout_after": result["heldout_after"],
    }
    for phase in ("generate_s", "score_s", "update_s"):
        if all(phase in s for s, _, _ in timed):
            out[phase] = statistics.median(s[phase] for s, _, _ in timed)
    return out


# --- the parent: pairs of runs, the table ---------------------------------------------------------------


def _child_args(args, framework: str, seed: int) -> list[str]:
    out = ["--child", framework, "--model-dir", str(args.model_dir), "--seed", str(seed), "--steps", str(args.steps),
           "--prompts", str(args.prompts), "--group", str(args.group), "--max-new-tokens", str(args.max_new_tokens),
           "--lr", str(args.lr), "--threads", str(args.threads)]
    return out + (["--reward-isolation", args.reward_isolation] if args.reward_isolation else [])


def table(runs: dict[str, list[dict]], ratios: dict[str, list[float]]) -> list[str]:
    rows = ["| trainer | runs | s / step | tokens / s | CPU s / step | tokens / CPU s | tokens / step "
            "| completion length | reward, first 10 steps | reward, last steps | held-out accuracy after |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for fw in FRAMEWORKS:
        done = runs.get(fw, [])  # --only runs one framework
        ok = [r for r in done if "error" not in r]
        if not ok:
            why = done[0].get("error", "?") if done else "not run"
            rows.append(f"| {fw} ({why}) | 0 | - | - | - | - | - | - | - | - | - |")
            continue
        rl = [r["reward_last"] for r in ok]
        acc = [r["heldout_after"] for r in ok]
        rows.append(f"| {fw} | {len(ok)} | {median_of(r['s_per_step'] for r in ok):.3f} "
                    f"| {median_of(r['tokens_per_s'] for r in ok):,.0f} | {median_of(r['cpu_s_per_step'] for r in ok):.3f} "
                    f"| {median_of(r['tokens_per_cpu_s'] for r in ok):,.0f} | {median_of(r['tokens_per_step'] for r in ok):,.0f} "
                    f"| {median_of(r['length'] for r in ok):.2f} | {median_of(r['reward_first'] for r in ok):.3f} "
                    f"| {statistics.mean(rl):.3f} ({min(rl):.3f}-{max(rl):.3f}) "
                    f"| {statistics.mean(acc):.3f} ({min(acc):.3f}-{max(acc):.3f}) |")
    for key, what in (("wall", "tokens per second"), ("cpu", "tokens per CPU second")):
        r = ratios.get(key) or []
        if r:
            rows += ["", f"steadyrl / TRL {what}, pair by pair: median **{statistics.median(r):.2f}x** "
                     f"(min {min(r):.2f}x, max {max(r):.2f}x, {len(r)} pairs)."]
    return rows


def _phases(runs: dict[str, list[dict]]) -> str:
    ok = [r for r in runs["steadyrl"] if "error" not in r and "generate_s" in r]
    if not ok:
        return ""
    g, s, u = (median_of(r[k] for r in ok) for k in ("generate_s", "score_s", "update_s"))
    return (f"steadyrl's step, medians: generation {g:.3f} s, reward {s:.3f} s, log-probs + update {u:.3f} s "
            "(its own `time/*` metrics).")


def report(args, runs, ratios, info, load) -> str:
    command = " ".join(["python -m benchmarks.bench_trl", *args.argv])
    lines = [f"Command: `{command}`", "",
             f"Machine: {machine(args.threads)}.", "",
             f"Workload: the demo model (2-layer Llama, hidden 128, character vocabulary of "
             f"{info['vocab']} tokens), warm-started ({info['warmstart_steps']} supervised steps; greedy held-out "
             f"accuracy {info['heldout_before']:.3f}); {args.prompts} prompts x {args.group} completions per step, "
             f"at most {args.max_new_tokens} new tokens, temperature 1.0, lr {args.lr:g}, {args.steps} steps; "
             f"medians over steps {args.warmup + 1}..{args.steps}; reward of the last {args.last} steps "
             "(mean over runs, min-max); seeds "
             f"{args.seed}..{args.seed + args.repeats - 1}, one pair of runs per seed.", "",
             f"Load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f}.", ""]
    lines += table(runs, ratios)
    phases = _phases(runs)
    if phases:
        lines += ["", phases]
    return "\n".join(lines) + "\n"


def _parse(argv):
    p = pair_parser(__doc__, FRAMEWORKS, steps=(150, 12), warmup=(5, 2), last=(20, 5), seed=SEED)
    p.add_argument("--prompts", type=int, default=32, help="prompts per step (the demo's 32)")
    p.add_argument("--group", type=int, default=8, help="completions per prompt (the demo's 8)")
    p.add_argument("--max-new-tokens", type=int, default=8, help="completion length limit (the demo's 8)")
    p.add_argument("--lr", type=float, default=2e-4, help="learning rate (the demo's 2e-4)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (the demo's 1)")
    p.add_argument("--reward-isolation", choices=["process", "thread", "inline"],
                   help="steadyrl's reward isolation (default: steadyrl's own, a worker process)")
    return pair_defaults(p.parse_args(argv), argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    if args.child:
        if args.model_dir is None:
            raise SystemExit("--child needs --model-dir")
        prepare(args.model_dir)  # no-op when the parent made it
        emit((child_steadyrl if args.child == "steadyrl" else child_trl)(args))
        return 0
    with tempfile.TemporaryDirectory(prefix="bench_trl_model_") as tmp:
        if args.model_dir is None:
            args.model_dir = Path(tmp)
        info = prepare(args.model_dir)
        load0 = os.getloadavg()[0]
        ratios: dict[str, list[float]] = {"wall": [], "cpu": []}

        def on_pair(pair):
            if all(fw in pair and "error" not in pair[fw] for fw in FRAMEWORKS):
                ratios["wall"].append(pair["steadyrl"]["tokens_per_s"] / pair["trl"]["tokens_per_s"])
                ratios["cpu"].append(pair["steadyrl"]["tokens_per_cpu_s"] / pair["trl"]["tokens_per_cpu_s"])

        labels = [args.only] if args.only else list(FRAMEWORKS)
        runs = run_pairs("benchmarks.bench_trl", labels, args, _child_args, summarize, on_pair)
        body = report(args, runs, ratios, info, (load0, os.getloadavg()[0]))
    return publish(args, body, {"runs": runs, "ratios": ratios}, ("bench_trl", "End to end vs TRL"),
                   any("error" in r for rs in runs.values() for r in rs))


if __name__ == "__main__":
    sys.exit(main())
