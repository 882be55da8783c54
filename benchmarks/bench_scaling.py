"""Scaling: steadyrl's GRPO step time and peak memory against response length and group size.

    python -m benchmarks.bench_scaling                   # lengths 64..1,024 at group 4, groups 2..16 at length 128
    python -m benchmarks.bench_scaling --quick           # smoke run: lengths 64, 128 and groups 2, 4, one timed step
    python -m benchmarks.bench_scaling --write-md BENCHMARKS.md
    python -m benchmarks.bench_scaling --mixed           # mixed response lengths: fixed split vs token budget

Every configuration is one fresh process running ``steadyrl.recipe.train`` for ``--warmup`` +
``--steps`` GRPO steps on the demo architecture (2-layer Llama, hidden 128, character vocabulary)
with random weights, ``--prompts`` prompts of the demo task per step, a reward that varies across
samples (the fraction of ``a`` in the completion, so advantages and gradients are not zero), no
KL term, ``trainer.micro_batch_size`` 8 and the other settings at steadyrl's defaults.

The responses are forced to their full length: the saved tokenizer's EOS is a token the model has
no output row for (the model's vocabulary stops one id short), so generation never stops early and
every response is exactly ``max_new_tokens`` long (the table shows the measured mean length).

Per configuration: tokens per step (prompt + response, every sample), the median over the timed
steps of the wall seconds between the ends of consecutive steps and of the process's CPU seconds,
the same per 1,000 tokens, split into the CPU seconds of generation (the engine's ``generate``)
and of the rest of the step (log-probs, loss, backward, optimizer, reward, logging), and the
process's peak resident set (``VmHWM``: interpreter, torch, model, optimizer and the step's
tensors), also as the increase over the resident set just before the first step.

``--mixed`` measures ``trainer.max_tokens_per_micro_batch`` instead: one batch of ``--prompts``
x ``--group`` rows whose responses have mixed lengths (3 in 4 short, 8..64 tokens; 1 in 4 long,
up to ``--length``), prompts 8..32 tokens left-padded, on the same model. Per split (``micro_batch_size``
rows, or a token budget), in a fresh process: the padding fraction of the forward passes
(padded tokens that are not real tokens), the median wall and CPU seconds of the update part of
a step (the no-grad old log-prob pass plus ``ppo_update``, GRPO loss, one optimizer step) over
``--steps`` repetitions after one warm-up, and the peak resident set over the start of the timed part.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from .common import emit, machine, publish, run_child, run_steadyrl

LENGTHS = (64, 128, 256, 512, 1024)
GROUPS = (2, 4, 8, 16)
FIXED_GROUP, FIXED_LENGTH = 4, 128
QUICK_LENGTHS, QUICK_GROUPS = (64, 128), (2, 4)
SEED = 0


def letter_reward(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
    """The fraction of ``a`` in each completion: cheap, and different across the samples of a group."""
    return [c.count("a") / max(len(c), 1) for c in completions]


def prepare(model_dir: Path, max_positions: int) -> None:
    """The demo model with random weights whose EOS can never be sampled, its tokenizer, the prompts."""
    if (model_dir / "train.jsonl").is_file():
        return
    from steadyrl.demo import build_char_tokenizer, build_tiny_model, make_splits
    from steadyrl.demo.task import VOCAB_CHARS

    tokenizer = build_char_tokenizer(VOCAB_CHARS, model_max_length=max_positions)
    model = build_tiny_model(tokenizer, max_positions=max_positions, seed=SEED)  # vocabulary: len(tokenizer)
    # A new EOS one id past the model's vocabulary: no logit for it, so no response ends before max_new_tokens.
    tokenizer.add_special_tokens({"eos_token": "<never>"})
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    train, _ = make_splits(2000, 0, seed=SEED)
    (model_dir / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))


def _config(args, out: Path) -> Path:
    config = {
        "model": {"name_or_path": str(args.model_dir), "dtype": "float32"},
        "data": {"train_path": str(args.model_dir / "train.jsonl"), "max_prompt_tokens": 64},
        "rewards": [{"name": "benchmarks.bench_scaling:letter_reward"}],
        "rollout": {"prompts_per_step": args.prompts, "group_size": args.group, "max_new_tokens": args.length,
                    "temperature": 1.0},
        "algorithm": {"preset": "grpo", "kl_mode": "none"},
        "optim": {"lr": 1e-4},
        "trainer": {"max_steps": args.warmup + args.steps, "seed": args.seed, "micro_batch_size": args.micro_batch,
                    "save_every": 0, "samples_every": 0, "num_threads": args.threads, "device": "cpu"},
    }
    path = out / "bench_config.yaml"
    path.write_text(json.dumps(config, indent=1))  # JSON is YAML
    return path


def child(args) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_scaling_") as tmp:
        steps, _ = run_steadyrl(_config(args, Path(tmp)), Path(tmp) / "run")
    timed = [(s, s["end"] - steps[i - 1]["end"], s["cpu"] - steps[i - 1]["cpu"])
             for i, s in enumerate(steps) if i >= max(args.warmup, 1)]
    return {
        "length": args.length, "group": args.group, "prompts": args.prompts, "timed_steps": len(timed),
        "tokens_per_step": statistics.mean(s["tokens"] for s, _, _ in timed),
        "response_length": statistics.mean(s["length"] for s in steps),
        "response_length_max": max(s["length_max"] for s in steps),
        "s_per_step": statistics.median(dt for _, dt, _ in timed),
        "cpu_s_per_step": statistics.median(c for _, _, c in timed),
        "generate_cpu_s": statistics.median(s["generate_cpu_s"] for s, _, _ in timed),
        "rest_cpu_s": statistics.median(c - s["generate_cpu_s"] for s, _, c in timed),
        "peak_rss_mib": max(s["peak_rss_mib"] for s in steps),
        "rss_before_mib": steps[0]["rss_before_mib"],
    }


# --- the parent ------------------------------------------------------------------------------------------


def _child_args(args, length: int, group: int) -> list[str]:
    return ["--child", "--model-dir", str(args.model_dir), "--length", str(length), "--group", str(group),
            "--prompts", str(args.prompts), "--warmup", str(args.warmup), "--steps", str(args.steps),
            "--threads", str(args.threads), "--micro-batch", str(args.micro_batch), "--seed", str(args.seed)]


def _row(r: dict, base: dict | None) -> str:
    if "error" in r:
        return f"| {r['length']:,} | {r['group']} | failed: {r['error']} | | | | | | | | | |"
    k = r["tokens_per_step"] / 1000
    per_k, cpu_k = r["s_per_step"] / k, r["cpu_s_per_step"] / k
    rel = "-"
    if base and "error" not in base:
        rel = f"{cpu_k / (base['cpu_s_per_step'] / (base['tokens_per_step'] / 1000)):.2f}x"
    return (f"| {r['length']:,} | {r['group']} | {r['response_length']:.0f} | {r['tokens_per_step']:,.0f} "
            f"| {r['s_per_step']:.2f} | {r['cpu_s_per_step']:.2f} | {per_k:.3f} | {cpu_k:.3f} | {rel} "
            f"| {r['generate_cpu_s'] / k:.3f} | {r['rest_cpu_s'] / k:.3f} "
            f"| {r['peak_rss_mib']:,.0f} | {r['peak_rss_mib'] - r['rss_before_mib']:,.0f} |")


def table(results: list[dict]) -> list[str]:
    head = ["| response length | group | mean response length | tokens / step | s / step | CPU s / step "
            "| s / 1k tokens | CPU s / 1k tokens | CPU per token vs first row | generation CPU s / 1k tokens "
            "| rest of the step CPU s / 1k tokens | peak RSS (MB) | peak over start (MB) |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    rows = []
    for sweep in ("length", "group"):
        part = [r for r in results if r["sweep"] == sweep]
        if part:
            rows += ["", f"**{'Response length' if sweep == 'length' else 'Group size'} sweep**", ""] + head
            rows += [_row(r, part[0]) for r in part]
    return rows[1:]


def report(args, results: list[dict], load: tuple, seconds: float) -> str:
    command = " ".join(["python -m benchmarks.bench_scaling", *args.argv])
    lines = [f"Command: `{command}`", "",
             f"Machine: {machine(args.threads)}.", "",
             f"Workload: the demo architecture with random weights; {args.prompts} prompts per step (demo "
             f"strings, {args.prompts} x group samples); every response forced to its full length; GRPO, no KL, "
             f"micro-batches of {args.micro_batch}; medians over {args.steps} timed step(s) after {args.warmup} "
             f"warm-up step(s), one fresh process per row. Whole sweep: {seconds / 60:.1f} min.", "",
             f"Load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f}.", ""]
    return "\n".join(lines + table(results)) + "\n"


# --- mixed response lengths: fixed split vs token budget ----------------------------------------------


def mixed_batch(rows: int, max_len: int, seed: int):
    """A batch of mixed response lengths (3 in 4 short, 1 in 4 long) with left-padded prompts."""
    import torch

    from steadyrl.trainer.batch import TrainBatch

    g = torch.Generator().manual_seed(seed)
    p_lens = torch.randint(8, 33, (rows,), generator=g)
    long = torch.rand(rows, generator=g) < 0.25
    r_lens = torch.where(long, torch.randint(max_len // 2, max_len + 1, (rows,), generator=g),
                         torch.randint(8, 65, (rows,), generator=g)).clamp(max=max_len)
    p_mask = (torch.arange(32) >= 32 - p_lens.unsqueeze(1)).long()
    r_mask = (torch.arange(max_len) < r_lens.unsqueeze(1)).long()
    ids = torch.randint(3, 12, (rows, 32 + max_len), generator=g) * torch.cat([p_mask, r_mask], 1)
    attention = torch.cat([p_mask, r_mask], 1)
    return TrainBatch(input_ids=ids, attention_mask=attention, position_ids=(attention.cumsum(-1) - 1).clamp(min=0),
                      response_ids=ids[:, 32:], response_mask=r_mask, loss_mask=r_mask.clone(),
                      advantages=torch.randn(rows, 1, generator=g).expand(rows, max_len) * r_mask)


def mixed_child(args) -> dict:
    import torch

    from steadyrl.config import load_config
    from steadyrl.models import load_policy
    from steadyrl.trainer.forward import response_logprobs
    from steadyrl.trainer.packing import micro_batch_plan, padding_stats
    from steadyrl.trainer.step import _per_token
    from steadyrl.trainer.update import ppo_update

    from .common import peak_rss_mib, reset_peak_rss, rss_mib

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cpu = torch.device("cpu")
    budget = args.budget or None
    config = load_config(None, ["trainer.device=cpu", "algorithm.kl_mode=none",
                                f"trainer.micro_batch_size={args.micro_batch}",
                                f"trainer.max_tokens_per_micro_batch={budget if budget else 'null'}",
                                f"trainer.padding_free={'true' if args.padding_free else 'false'}"])
    policy = load_policy(str(args.model_dir), dtype=torch.float32, device=cpu)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-5)
    batch = mixed_batch(args.prompts * args.group, args.length, args.seed)
    plan = micro_batch_plan(batch, args.micro_batch, budget, padding_free=args.padding_free)
    real, padded = padding_stats(batch, plan)
    padded = real if args.padding_free else padded  # one packed row per micro-batch: no padding at all
    times, cpus = [], []
    for i in range(args.steps + 1):
        if i == 1:
            rss0 = rss_mib()
            reset_peak_rss()
        t0, c0 = time.perf_counter(), time.process_time()
        old = _per_token(lambda m: response_logprobs(policy, m, temperature=1.0, padding_free=args.padding_free)[0],
                         batch, args.micro_batch, cpu, budget, args.padding_free)
        ppo_update(policy, optimizer, replace_old(batch, old), config, kl_coef=0.0, device=cpu)
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return {"budget": budget, "padding_free": args.padding_free, "micro_batch": args.micro_batch,
            "rows": len(batch), "real_tokens": real, "padded_tokens": padded, "micro_batches": len(plan),
            "s": statistics.median(times[1:]), "cpu_s": statistics.median(cpus[1:]),
            "peak_over_start_mib": peak_rss_mib() - rss0}


def replace_old(batch, old):
    from dataclasses import replace

    return replace(batch, old_logprobs=old)


def mixed_report(args, results: list[dict], load: tuple, seconds: float) -> str:
    command = " ".join(["python -m benchmarks.bench_scaling", *args.argv])
    lines = [f"Command: `{command}`", "", f"Machine: {machine(args.threads)}.", "",
             f"Workload: one batch of {args.prompts * args.group} rows, prompts 8..32 tokens (left-padded to 32), "
             f"responses 3 in 4 of 8..64 tokens and 1 in 4 of {args.length // 2}..{args.length} (right-padded to "
             f"{args.length}); the demo architecture (random weights, float32); per repetition the no-grad old "
             f"log-prob pass and `ppo_update` (GRPO loss, one optimizer step); medians over {args.steps} repetitions "
             f"after one warm-up, one fresh process per row. Whole run: {seconds / 60:.1f} min.", "",
             f"Load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f}.", "",
             "| split | micro-batches | real tokens | tokens processed (with padding) | padding fraction "
             "| s / update | CPU s / update | peak RSS over start (MB) |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        name = (f"`max_tokens_per_micro_batch={r['budget']}`" if r.get("budget")
                else f"`micro_batch_size={args.micro_batch}`") + (" + `padding_free`" if r.get("padding_free") else "")
        if "error" in r:
            lines.append(f"| {name} | failed: {r['error']} | | | | | | |")
            continue
        lines.append(f"| {name} | {r['micro_batches']} | {r['real_tokens']:,} | {r['padded_tokens']:,} "
                     f"| {1 - r['real_tokens'] / r['padded_tokens']:.1%} | {r['s']:.2f} | {r['cpu_s']:.2f} "
                     f"| {r['peak_over_start_mib']:,.0f} |")
    return "\n".join(lines) + "\n"


def mixed_main(args) -> int:
    started, load0 = time.perf_counter(), os.getloadavg()[0]
    width = 32 + args.length
    budgets = args.budgets or [args.micro_batch * width, args.micro_batch * width // 2]
    results = []
    with tempfile.TemporaryDirectory(prefix="bench_scaling_model_") as tmp:
        model_dir = args.model_dir or Path(tmp)
        prepare(model_dir, max_positions=width + 8)
        runs = [(b, False) for b in [0, *budgets]] + ([(0, True), (budgets[0], True)] if args.padding_free else [])
        for budget, padding_free in runs:
            child_args = ["--padding-free"] * padding_free + ["--child", "--mixed", "--model-dir", str(model_dir), "--length", str(args.length),
                          "--group", str(args.group), "--prompts", str(args.prompts), "--steps", str(args.steps),
                          "--threads", str(args.threads), "--micro-batch", str(args.micro_batch),
                          "--seed", str(args.seed), "--budget", str(budget)]
            res = run_child("benchmarks.bench_scaling", child_args, args.timeout)
            results.append({"budget": budget, "padding_free": padding_free, **res})
            print(results[-1], flush=True)
    body = mixed_report(args, results, (load0, os.getloadavg()[0]), time.perf_counter() - started)
    return publish(args, body, results, ("bench_scaling_mixed", "Token-budget micro-batches"),
                   any("error" in r for r in results))


def _parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke run: lengths 64, 128, groups 2, 4, one timed step")
    p.add_argument("--lengths", type=int, nargs="+",
                   help=f"response lengths at group {FIXED_GROUP} (default {LENGTHS})")
    p.add_argument("--groups", type=int, nargs="+", help=f"group sizes at length {FIXED_LENGTH} (default {GROUPS})")
    p.add_argument("--prompts", type=int, default=8, help="prompts per step")
    p.add_argument("--steps", type=int, help="timed steps per configuration (default 3; 1 with --quick)")
    p.add_argument("--warmup", type=int, default=1, help="steps before the timed ones")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--micro-batch", type=int, default=8, help="trainer.micro_batch_size")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--model-dir", type=Path, help="where the model goes (default: a temporary directory)")
    p.add_argument("--timeout", type=int, default=900, help="seconds per configuration")
    p.add_argument("--write-md", metavar="PATH", help="write the result into this markdown file")
    p.add_argument("--json", metavar="PATH", help="write the rows as JSON")
    p.add_argument("--mixed", action="store_true", help="mixed response lengths: fixed split vs token budget")
    p.add_argument("--budgets", type=int, nargs="+", help="--mixed: token budgets (default micro_batch x "
                   "padded width, and half of it)")
    p.add_argument("--padding-free", action="store_true",
                   help="--mixed: also the fixed split and the first budget with trainer.padding_free")
    p.add_argument("--budget", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--length", type=int, help=argparse.SUPPRESS)
    p.add_argument("--group", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.argv = argv
    args.steps = args.steps or (1 if args.quick else 3)
    if args.mixed and args.length is None:
        args.length = 256 if args.quick else 1024
    if args.mixed and args.group is None:
        args.group = FIXED_GROUP
    args.lengths = args.lengths or (QUICK_LENGTHS if args.quick else LENGTHS)
    args.groups = args.groups or (QUICK_GROUPS if args.quick else GROUPS)
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    if args.child:
        emit(mixed_child(args) if args.mixed else child(args))
        return 0
    if args.mixed:
        return mixed_main(args)
    started = time.perf_counter()
    configs = [("length", n, FIXED_GROUP) for n in args.lengths] + [("group", FIXED_LENGTH, g) for g in args.groups]
    with tempfile.TemporaryDirectory(prefix="bench_scaling_model_") as tmp:
        if args.model_dir is None:
            args.model_dir = Path(tmp)
        prepare(args.model_dir, max_positions=2 * max(max(args.lengths), FIXED_LENGTH) + 64)
        load0, results, done = os.getloadavg()[0], [], {}
        for sweep, length, group in configs:
            key = (length, group)
            if key not in done:  # (128, 4) is in both sweeps: run once
                res = run_child("benchmarks.bench_scaling", _child_args(args, length, group), args.timeout)
                done[key] = {"length": length, "group": group, **res}
            results.append({**done[key], "sweep": sweep})
            print(_row(results[-1], None), flush=True)
        body = report(args, results, (load0, os.getloadavg()[0]), time.perf_counter() - started)
    return publish(args, body, results, ("bench_scaling", "Scaling"), any("error" in r for r in results))


if __name__ == "__main__":
    sys.exit(main())
