"""Multi-turn tool use: steadyrl's episodes vs TRL's ``GRPOTrainer(tools=...)``, same task and settings.

    python -m benchmarks.bench_agents                    # 3 pairs of 20 steps (~17 min under load) + ~6 min warm start
    python -m benchmarks.bench_agents --quick            # smoke run: one pair of 6 steps
    python -m benchmarks.bench_agents --write-md BENCHMARKS.md

The task (:mod:`benchmarks.agent_task`): ``What is 23+45?`` with an ``add`` tool; success is an
episode whose last assistant message is the sum. The model is the demo's 2-layer Llama over a
word-piece tokenizer carrying the Qwen2.5 look-alike chat template of ``tests/agents/templates.py``,
warm-started until it calls the tool; both trainers load it from one directory, and each run is a
fresh process:

* ``steadyrl``: :func:`steadyrl.recipe.train` with ``rollout.multi_turn.tools: [benchmarks.agent_task:add]``,
  ``rollout.multi_turn.tool_parser: hermes``;
* ``trl``: ``GRPOTrainer(tools=[add])`` (TRL 1.16 on transformers 5.23).

TRL's tool path runs here. What it needs, and what the benchmark does for it: TRL finds a tool-call
parser by comparing the tokenizer's chat template, byte for byte, with the templates it ships
(``trl.chat_template_utils.add_response_schema``); the look-alike renders every conversation of
this task exactly as Qwen2.5's template does but is not the same string, so TRL raises
``ValueError: Unrecognized chat template, failed to add response schema`` and asks for a parser to
be set on the tokenizer. The benchmark sets the one TRL picks for Qwen2.5 itself
(``tokenizer.response_template = trl.chat_template_utils.qwen3_template``). The template passes
TRL's other checks as it is (``supports_tool_calling``, ``is_chat_template_prefix_preserving``).

Settings made equal (steadyrl = TRL):

* batch: ``prompts_per_step`` P x ``group_size`` G = ``per_device_train_batch_size`` P*G,
  ``num_generations`` G, ``steps_per_generation`` 1;
* episode length: TRL has one budget, ``max_completion_length`` L, for every token after the prompt
  (turns and tool results), and generates each turn with ``max_new_tokens`` = L, cutting what
  overflows; so ``max_new_tokens`` = ``max_episode_tokens`` = L in steadyrl (a turn is cut to what is left);
* turns: ``max_turns`` K = ``max_tool_calling_iterations`` K - 1 (the first turn is not an iteration);
* tools: TRL calls them in the trainer's process, one after the other, with no time limit; that is
  steadyrl's ``rollout.multi_turn.tool_isolation: inline``. ``--default-isolation`` adds a row with steadyrl's
  default on Linux, ``process`` (each call in a forked child, killed at ``tool_timeout_s``);
* the rest as in ``bench_trl``: temperature 1.0, top-p 1, top-k off; ``grpo`` + ``norm_by_std`` =
  ``scale_rewards="group"``; ``ppo`` clip 0.2 ``token-mean`` = ``epsilon`` 0.2 ``loss_type="dapo"``; no KL
  (``beta`` 0); one update per batch; truncated episodes kept in the loss; AdamW, constant lr, clip
  1.0; no gradient checkpointing; float32 on the CPU, one torch thread.

Both train on the policy's tokens only: steadyrl's ``policy_mask``, TRL's ``tool_mask``.

Measured per step, the same way for both: the wall (and CPU) time between the ends of consecutive
steps, and the tokens the step processed, counted two ways over every episode: **total** = prompt +
everything after it (turns and tool results: what the forward passes run over), **policy** = the
tokens the policy sampled (what is trained). steadyrl: ``prompt_mask.sum() + response_mask.sum()``
and ``response/length_mean`` x rows; TRL: ``prompt_mask.sum() + completion_mask.sum()`` and
``(completion_mask * tool_mask).sum()`` of its batch. Tool calls per episode: steadyrl's
``rollout/tool_calls_per_episode``, TRL's ``tools/call_frequency`` (calls / samples: the same).
Held-out success: the final policy's greedy episodes on held-out prompts, played by one function
(:func:`benchmarks.agent_task.play`) for both.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from . import agent_task as task
from .common import emit, machine, median_of, pair_defaults, pair_parser, publish, run_pairs, run_steadyrl

FRAMEWORKS = ("steadyrl", "trl")
VARIANTS = {  # row label: (framework, steadyrl's rollout.multi_turn.tool_isolation)
    "steadyrl": ("steadyrl", "inline"),  # tools called in the trainer's process, one after the other: as TRL
    "trl": ("trl", None),
    "steadyrl, default isolation": ("steadyrl", None),  # a forked process per tool call (Linux default)
}
KEEP = ("rollout/tool_calls_per_episode", "rollout/turns_mean", "response/length_mean")


def _limits(args) -> dict:
    return {"max_new_tokens": args.max_tokens, "max_turns": args.max_turns, "episode_tokens": args.max_tokens}


def _heldout(model, tokenizer, args) -> dict:
    rows = task.read_rows(args.model_dir, "heldout.jsonl")[: args.heldout]
    return task.heldout_success(model, tokenizer, rows, **_limits(args))


def _heldout_before(args, info: dict) -> dict:
    """The warm-started model's held-out success (computed once per model directory and limits)."""
    key = f"heldout_before {args.heldout} {args.max_tokens} {args.max_turns}"
    if key not in info:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(1)
        model = AutoModelForCausalLM.from_pretrained(args.model_dir)
        info[key] = _heldout(model, AutoTokenizer.from_pretrained(args.model_dir), args)
        (args.model_dir / "bench_info.json").write_text(json.dumps(info))
    return info[key]


# --- the children: one framework, one run ----------------------------------------------------------------


def _steadyrl_config(args, out: Path) -> Path:
    batch = args.prompts * args.group
    config = {
        "model": {"name_or_path": str(args.model_dir), "dtype": "float32"},
        "data": {"train_path": str(args.model_dir / "train.jsonl"), "shuffle": True},
        "rewards": [{"name": task.REWARD_SPEC}],
        "rollout": {"prompts_per_step": args.prompts, "group_size": args.group, "max_new_tokens": args.max_tokens,
                    "temperature": 1.0, "top_p": 1.0, "top_k": 0, "tools": [task.TOOL_SPEC],
                    "tool_parser": "hermes", "max_turns": args.max_turns, "max_episode_tokens": args.max_tokens,
                    **({"tool_isolation": args.tool_isolation} if args.tool_isolation else {})},
        "algorithm": {"preset": "grpo", "advantage_estimator": "grpo", "norm_by_std": True, "policy_loss": "ppo",
                      "pg_clip": 0.2, "loss_agg_mode": "token-mean", "kl_mode": "none", "mask_truncated": False,
                      "entropy_coef": 0.0},
        "optim": {"lr": args.lr, "schedule": "constant", "warmup_steps": 0, "weight_decay": 0.0,
                  "betas": [0.9, 0.999], "eps": 1e-8, "max_grad_norm": 1.0},
        "trainer": {"max_steps": args.steps, "seed": args.seed, "ppo_epochs": 1, "mini_batch_size": None,
                    "micro_batch_size": batch, "save_every": 0, "samples_every": 0, "num_threads": 1,
                    "device": "cpu"},
    }
    path = out / "bench_config.yaml"
    path.write_text(json.dumps(config, indent=1))  # JSON is YAML
    return path


def child_steadyrl(args) -> dict:
    rows = args.prompts * args.group
    with tempfile.TemporaryDirectory(prefix="bench_agents_steadyrl_") as tmp:
        steps, run = run_steadyrl(_steadyrl_config(args, Path(tmp)), Path(tmp) / "run", keep=KEEP)
        heldout = _heldout(run.models.policy, run.models.tokenizer, args)
    records = [{"end": s["end"], "cpu": s["cpu"], "tokens": s["tokens"], "reward": s["reward"],
                "policy_tokens": round(s["metrics"]["response/length_mean"] * rows),
                "tool_calls": s["metrics"]["rollout/tool_calls_per_episode"],
                "turns": s["metrics"]["rollout/turns_mean"]} for s in steps]
    return {"steps": records, "heldout": heldout}


def _turns(policy_row) -> int:
    """Runs of 1 in a row of the policy mask: the policy's turns."""
    row = policy_row.tolist()
    return sum(1 for i, x in enumerate(row) if x and (i == 0 or not row[i - 1]))


def child_trl(args) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_template

    torch.set_num_threads(1)
    steps: list[dict] = []
    batches: list[dict] = []

    class CountingGRPOTrainer(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            done = out["completion_mask"]
            policy = done * out["tool_mask"] if "tool_mask" in out else done
            batches.append({"tokens": int(out["prompt_mask"].sum() + done.sum()), "policy_tokens": int(policy.sum()),
                            "turns": sum(_turns(r) for r in policy) / len(policy)})
            return out

    class StepTimer(TrainerCallback):
        def on_step_end(self, a, state, control, **kw):
            steps.append({"end": time.perf_counter(), "cpu": time.process_time(), **batches[-1]})

        def on_log(self, a, state, control, logs=None, **kw):
            if logs and "reward" in logs and steps:
                steps[-1]["reward"] = logs["reward"]
                steps[-1]["tool_calls"] = logs.get("tools/call_frequency")

    batch = args.prompts * args.group
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    tokenizer.response_template = qwen3_template  # the parser TRL picks for Qwen2.5 (see the module docstring)
    with tempfile.TemporaryDirectory(prefix="bench_agents_trl_") as tmp:
        config = GRPOConfig(
            output_dir=tmp, use_cpu=True, bf16=False, fp16=False, seed=args.seed, max_steps=args.steps,
            per_device_train_batch_size=batch, gradient_accumulation_steps=1, steps_per_generation=1,
            num_generations=args.group, max_completion_length=args.max_tokens,
            max_tool_calling_iterations=args.max_turns - 1,
            temperature=1.0, top_p=1.0, top_k=0, repetition_penalty=1.0,
            learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
            adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, optim="adamw_torch", max_grad_norm=1.0,
            beta=0.0, epsilon=0.2, num_iterations=1, loss_type="dapo", scale_rewards="group",
            importance_sampling_level="token", mask_truncated_completions=False, disable_dropout=True,
            gradient_checkpointing=False, shuffle_dataset=True,
            logging_steps=1, save_strategy="no", eval_strategy="no", report_to="none",
            dataloader_num_workers=0, disable_tqdm=True,
        )
        dataset = Dataset.from_list(task.read_rows(args.model_dir, "train.jsonl"))
        trainer = CountingGRPOTrainer(model=str(args.model_dir), reward_funcs=task.answer_reward, args=config,
                                      train_dataset=dataset, processing_class=tokenizer, tools=[task.add],
                                      callbacks=[StepTimer()])
        assert next(trainer.model.parameters()).dtype == torch.float32
        trainer.train()
        heldout = _heldout(trainer.model, tokenizer, args)
    return {"steps": steps, "heldout": heldout}


# --- the parent: pairs of runs, the table ---------------------------------------------------------------


def summarize(result: dict, warmup: int, last: int) -> dict:
    """Per-run figures from the per-step records (medians over the steps after ``warmup``)."""
    steps = result["steps"]
    timed = [(s, s["end"] - steps[i - 1]["end"], s["cpu"] - steps[i - 1]["cpu"])
             for i, s in enumerate(steps) if i >= max(warmup, 1)]
    rewards = [s["reward"] for s in steps if s.get("reward") is not None]
    calls = [s["tool_calls"] for s in steps if s.get("tool_calls") is not None]
    return {
        "timed_steps": len(timed),
        "s_per_step": statistics.median(dt for _, dt, _ in timed),
        "tokens_per_s": statistics.median(s["tokens"] / dt for s, dt, _ in timed),
        "policy_tokens_per_s": statistics.median(s["policy_tokens"] / dt for s, dt, _ in timed),
        "tokens_per_cpu_s": statistics.median(s["tokens"] / c for s, _, c in timed),
        "tokens_per_step": statistics.mean(s["tokens"] for s, _, _ in timed),
        "policy_tokens_per_step": statistics.mean(s["policy_tokens"] for s, _, _ in timed),
        "tool_calls": statistics.mean(calls),
        "turns": statistics.mean(s["turns"] for s in steps),
        "reward_first": statistics.mean(rewards[:last]),
        "reward_last": statistics.mean(rewards[-last:]),
        "heldout_success": result["heldout"]["success"],
        "heldout_tool_calls": result["heldout"]["tool_calls"],
    }


def _child_args(args, label: str, seed: int) -> list[str]:
    framework, isolation = VARIANTS[label]
    out = ["--child", framework, "--model-dir", str(args.model_dir), "--seed", str(seed), "--steps", str(args.steps),
           "--prompts", str(args.prompts), "--group", str(args.group), "--max-tokens", str(args.max_tokens),
           "--max-turns", str(args.max_turns), "--lr", str(args.lr), "--heldout", str(args.heldout),
           "--warm-steps", *map(str, args.warm_steps)]
    return out + (["--tool-isolation", isolation] if isolation else [])


def _spread(values) -> str:
    return f"{statistics.mean(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def _pair_ratios(pair: dict[str, dict], ratios: dict) -> None:
    """steadyrl's rows over TRL's, for one pair of runs."""
    t = pair.get("trl")
    for label, s in pair.items():
        if label == "trl" or t is None or "error" in t or "error" in s:
            continue
        for key, fig in (("total", "tokens_per_s"), ("policy", "policy_tokens_per_s"), ("cpu", "tokens_per_cpu_s")):
            ratios.setdefault((label, key), []).append(s[fig] / t[fig])


def table(runs: dict[str, list[dict]], ratios: dict[str, list[float]]) -> list[str]:
    rows = ["| trainer | runs | s / step | steps / s | total tokens / s | policy tokens / s | total tokens / CPU s "
            "| total / policy tokens per step | tool calls / episode | turns / episode | reward, first steps "
            "| reward, last steps | held-out success after |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for fw in runs:
        ok = [r for r in runs[fw] if "error" not in r]
        if not ok:
            why = runs[fw][0].get("error", "?") if runs[fw] else "not run"
            rows.append(f"| {fw} ({why}) | 0 |" + " - |" * 11)
            continue
        med = {k: median_of(r[k] for r in ok) for k in ok[0] if isinstance(ok[0][k], (int, float))}
        rows.append(f"| {fw} | {len(ok)} | {med['s_per_step']:.2f} | {1 / med['s_per_step']:.3f} "
                    f"| {med['tokens_per_s']:,.0f} | {med['policy_tokens_per_s']:,.0f} | {med['tokens_per_cpu_s']:,.0f} "
                    f"| {med['tokens_per_step']:,.0f} / {med['policy_tokens_per_step']:,.0f} | {med['tool_calls']:.2f} "
                    f"| {med['turns']:.2f} | {_spread([r['reward_first'] for r in ok])} "
                    f"| {_spread([r['reward_last'] for r in ok])} | {_spread([r['heldout_success'] for r in ok])} |")
    for (label, key), r in ratios.items():
        what = {"total": "total tokens per second", "policy": "policy tokens per second",
                "cpu": "total tokens per CPU second"}[key]
        if r:
            rows += ["", f"{label} / TRL {what}, pair by pair: median **{statistics.median(r):.2f}x** "
                     f"(min {min(r):.2f}x, max {max(r):.2f}x, {len(r)} pairs)."]
    return rows


def report(args, runs, ratios, info, load) -> str:
    command = " ".join(["python -m benchmarks.bench_agents", *args.argv])
    lines = [f"Command: `{command}`", "", f"Machine: {machine(1)}.", "",
             f"Workload: the demo architecture (2-layer Llama, hidden 128) over a {info['vocab']}-token word-piece "
             f"vocabulary, warm-started on tool-using episodes ({info['warm_steps'][0]} supervised steps without the "
             f"tools' system prompt, {info['warm_steps'][1]} with it; {info['warm_s']:.0f} s; greedy held-out success "
             f"{info['before']['success']:.3f}, {info['before']['tool_calls']:.2f} tool calls per episode); prompts of "
             f"{info['prompt_tokens']} tokens (system prompt with the `add` tool's schema); {args.prompts} prompts x "
             f"{args.group} episodes per step, at most {args.max_turns} turns and {args.max_tokens} tokens after the "
             f"prompt, temperature 1.0, lr {args.lr:g}, {args.steps} steps; medians over steps "
             f"{args.warmup + 1}..{args.steps}; rewards: mean of the first and of the last {args.last} steps (mean "
             f"over runs, min-max); held-out success: greedy, {args.heldout} held-out prompts; seeds "
             f"{args.seed}..{args.seed + args.repeats - 1}, one pair of runs per seed.", "",
             f"Load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f}.", ""]
    return "\n".join(lines + table(runs, ratios)) + "\n"


def _parse(argv):
    p = pair_parser(__doc__, FRAMEWORKS, steps=(20, 6), warmup=(3, 2), last=(5, 2), seed=1)
    p.add_argument("--prompts", type=int, default=8, help="prompts per step")
    p.add_argument("--group", type=int, default=8, help="episodes per prompt")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens after the prompt (turns and tool results)")
    p.add_argument("--max-turns", type=int, default=3, help="policy turns per episode")
    p.add_argument("--lr", type=float, default=1e-4, help="learning rate")
    p.add_argument("--heldout", type=int, help="held-out prompts played greedily after training (default 50; 20 quick)")
    p.add_argument("--warm-steps", type=int, nargs=2, default=[300, 30], metavar=("SHORT", "FULL"),
                   help="supervised warm-start steps of the shared model: without, then with the tools' prompt")
    p.add_argument("--tool-isolation", choices=["process", "thread", "inline"],
                   help="steadyrl's rollout.multi_turn.tool_isolation (children; the parent sets it per row)")
    p.add_argument("--default-isolation", action="store_true",
                   help="also run steadyrl with its default tool isolation (a forked process per call) in every pair")
    args = pair_defaults(p.parse_args(argv), argv)
    args.heldout = args.heldout or (20 if args.quick else 50)
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    if args.child:
        if args.model_dir is None:
            raise SystemExit("--child needs --model-dir")
        task.prepare(args.model_dir, warm_steps=tuple(args.warm_steps))  # no-op when the parent made it
        emit((child_steadyrl if args.child == "steadyrl" else child_trl)(args))
        return 0
    with tempfile.TemporaryDirectory(prefix="bench_agents_model_") as tmp:
        if args.model_dir is None:
            args.model_dir = Path(tmp)
        info = task.prepare(args.model_dir, warm_steps=tuple(args.warm_steps))
        info["before"] = _heldout_before(args, info)
        load0 = os.getloadavg()[0]
        labels = list(VARIANTS) if args.default_isolation else ["steadyrl", "trl"]
        labels = [x for x in labels if args.only is None or VARIANTS[x][0] == args.only]
        ratios: dict[tuple[str, str], list[float]] = {}
        runs = run_pairs("benchmarks.bench_agents", labels, args, _child_args, summarize,
                         lambda pair: _pair_ratios(pair, ratios))
        body = report(args, runs, ratios, info, (load0, os.getloadavg()[0]))
    results = {"runs": runs, "ratios": {f"{a} {b}": r for (a, b), r in ratios.items()}}
    return publish(args, body, results, ("bench_agents", "Multi-turn tool use vs TRL"),
                   any("error" in r for rs in runs.values() for r in rs))


if __name__ == "__main__":
    sys.exit(main())
