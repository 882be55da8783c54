"""Log-probs + entropy, forward and backward, at V = 151,936 and hidden 896: peak memory and time.

    python -m benchmarks.bench_logprobs                    # 512 / 2,048 / 8,192 tokens, float32
    python -m benchmarks.bench_logprobs --quick            # smoke run: 256 tokens, one repetition
    python -m benchmarks.bench_logprobs --write-md BENCHMARKS.md

Every method computes the log-probs of the labels and the entropies of ``softmax(hidden @ W.T)``
and backpropagates ``sum(logp * g1 + entropy * g2)`` to ``hidden`` and ``W`` (fixed random g1, g2):

* ``steadyrl-fused``: ``logprobs_from_hidden(hidden, W, labels, return_entropy=True)``;
* ``steadyrl-chunked-grad``: ``logprobs_from_hidden_rows`` (``trainer.logprob_impl: chunked_grad``:
  whole-vocabulary-row token chunks, one recompute in the backward; none with ``--frozen-head``);
* ``steadyrl-chunked``: ``logits = hidden @ W.T``, then ``logprobs_and_entropy_from_logits``;
* ``naive``: ``logp = log_softmax((hidden @ W.T).float(), -1)``, ``logp.gather(...)`` and
  ``-(logp.exp() * logp).sum(-1)``;
* ``trl``: ``logits = hidden @ W.T``, then TRL's ``selective_log_softmax_and_entropy``
  (``selective_log_softmax`` + TRL's chunked ``entropy_from_logits``; without Triton, the plain
  PyTorch path), or ``selective_log_softmax`` + the naive entropy on TRL versions without it.

Each repetition of each (method, token count) runs in a fresh subprocess, so one method's freed
memory never hides another's peak, and the repetitions are interleaved across methods (round 1:
every method, round 2: every method, ...), so a change in the machine's load during the run falls
on all methods alike; "min" is the least disturbed repetition. The child allocates its inputs, warms
up on 32 tokens, resets its peak resident set (``/proc/self/clear_refs``), runs forward + backward
and reads ``VmHWM``:
"peak RSS" is that absolute peak (interpreter, torch, inputs included), "over inputs" is the peak
minus the resident set just before the repetition (inputs and warm-up state), i.e. what the method
itself needs, the weight gradient included. The child runs under an address-space limit below the
free memory, so a method that does not fit fails with an allocation error instead of waking the
OOM killer; its row then reports the peak it reached before failing, a lower bound.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .common import machine, peak_rss_mib, reset_peak_rss, rss_mib

V, H = 151_936, 896
SEQ_LEN = 512  # hidden is [tokens / SEQ_LEN, SEQ_LEN, H]
WARMUP_TOKENS = 32  # warm-up: library initialisation and first-call paths, not a full-size run
TOKENS = (512, 2048, 8192)
QUICK_TOKENS = (256,)
TARGET_TOKENS = 8192  # the memory target (peak at most 0.1x naive) is stated at this size
GIB = 2**30
REPO = Path(__file__).resolve().parent.parent
MD_MARK = "<!-- bench_logprobs:{dtype}:{end} -->"  # one generated block per dtype in BENCHMARKS.md


# --- the methods -----------------------------------------------------------------------------------


def _fused(hidden, weight, labels):
    from steadyrl.functional import logprobs_from_hidden

    return logprobs_from_hidden(hidden, weight, labels, return_entropy=True)


def _chunked_grad(hidden, weight, labels):
    from steadyrl.functional import logprobs_from_hidden_rows

    return logprobs_from_hidden_rows(hidden, weight, labels, return_entropy=True)


def _chunked(hidden, weight, labels):
    from steadyrl.functional import logprobs_and_entropy_from_logits

    return logprobs_and_entropy_from_logits(hidden @ weight.T, labels)


def _naive(hidden, weight, labels):
    import torch

    logits = hidden @ weight.T
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)


def _trl(hidden, weight, labels):
    from trl.trainer import utils

    logits = hidden @ weight.T
    if hasattr(utils, "selective_log_softmax_and_entropy"):
        return utils.selective_log_softmax_and_entropy(logits, labels)
    logp = utils.selective_log_softmax(logits, labels)
    full = logits.float().log_softmax(-1)
    return logp, -(full.exp() * full).sum(-1)


METHODS = {"steadyrl-fused": _fused, "steadyrl-chunked-grad": _chunked_grad, "steadyrl-chunked": _chunked,
           "naive": _naive, "trl": _trl}


# --- the child: one method at one size --------------------------------------------------------------


def _inputs(tokens: int, dtype, seed: int = 0, frozen_head: bool = False):
    import torch

    g = torch.Generator().manual_seed(seed)
    shape = (max(1, tokens // SEQ_LEN), min(tokens, SEQ_LEN))
    hidden = torch.randn(*shape, H, generator=g).to(dtype).requires_grad_(True)
    weight = (torch.randn(V, H, generator=g) * 0.02).to(dtype).requires_grad_(not frozen_head)
    labels = torch.randint(0, V, shape, generator=g)
    g1, g2 = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    return hidden, weight, labels, g1, g2


def _step(fn, hidden, weight, labels, g1, g2) -> None:
    logp, ent = fn(hidden, weight, labels)
    (logp.float() * g1 + ent.float() * g2).sum().backward()


def measure(fn, tokens: int, reps: int, dtype_name: str, threads: int, frozen_head: bool = False) -> dict:
    """Time and peak memory of ``reps`` forward + backward passes of ``fn`` in this process."""
    import torch

    torch.set_num_threads(threads)
    hidden, weight, labels, g1, g2 = _inputs(tokens, getattr(torch, dtype_name), frozen_head=frozen_head)
    w = min(tokens, WARMUP_TOKENS)
    warm = hidden[:1, :w].detach().clone().requires_grad_(True)
    _step(fn, warm, weight, labels[:1, :w], g1[:1, :w], g2[:1, :w])
    weight.grad = None
    del warm
    out = {"tokens": tokens, "wall_s": [], "cpu_s": [], "peak_mib": [], "over_inputs_mib": []}
    for _ in range(reps):
        hidden.grad = weight.grad = None
        gc.collect()
        base = rss_mib()
        reset_peak_rss()
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            _step(fn, hidden, weight, labels, g1, g2)
        except (RuntimeError, MemoryError) as e:  # allocation failure under the address-space limit
            peak = peak_rss_mib()
            out.update(oom=True, error=str(e).splitlines()[0][:200], peak_mib=[peak], over_inputs_mib=[peak - base])
            return out
        out["wall_s"].append(time.perf_counter() - t0)
        out["cpu_s"].append(time.process_time() - c0)
        peak = peak_rss_mib()
        out["peak_mib"].append(peak)
        out["over_inputs_mib"].append(peak - base)
    return out


# --- the parent: one subprocess per configuration --------------------------------------------------


def _available_gib() -> float:
    with open("/proc/meminfo") as f:
        info = {line.split(":")[0]: int(line.split()[1]) for line in f}
    return info["MemAvailable"] / 2**20


def _run_child(method: str, tokens: int, reps: int, args) -> dict:
    cap = int(min(args.mem_cap_gib, _available_gib() - args.mem_margin_gib) * GIB)
    cmd = [sys.executable, "-m", "benchmarks.bench_logprobs", "--child", method, "--tokens", str(tokens),
           "--reps", str(reps), "--dtype", args.dtype, "--threads", str(args.threads)]
    cmd += ["--frozen-head"] if args.frozen_head else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=args.timeout,
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap)))
    except subprocess.TimeoutExpired:
        return {"method": method, "tokens": tokens, "error": f"timed out after {args.timeout} s", "cap_gib": cap / GIB}
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        return {"method": method, "tokens": tokens, "error": tail[0][:200], "cap_gib": cap / GIB}
    return {"method": method, **json.loads(lines[-1][len("RESULT "):]), "cap_gib": cap / GIB}


def _merge(prev: dict | None, new: dict) -> dict:
    """Fold one more round of a configuration into what the earlier rounds measured."""
    if prev is None:
        return new
    if new.get("error") or new.get("oom"):
        prev.setdefault("failed_rounds", []).append(new.get("error", "?"))
        return prev
    for key in ("wall_s", "cpu_s", "peak_mib", "over_inputs_mib"):
        prev[key] = prev.get(key, []) + new[key]
    return prev


def _collect(tokens: int, args) -> list[dict]:
    """Every method at ``tokens``, repetitions interleaved across methods, one subprocess each."""
    merged: dict[str, dict | None] = dict.fromkeys(args.methods)
    for _ in range(_reps_for(tokens, args)):
        for method in args.methods:
            prev = merged[method]
            if prev is not None and (prev.get("error") or prev.get("oom")):
                continue  # it did not fit (or failed) once: another round would only repeat that
            r = _run_child(method, tokens, 1, args)
            print(_table([r])[-1], flush=True)
            merged[method] = _merge(prev, r)
    return list(merged.values())


def _reps_for(tokens: int, args) -> int:
    if args.reps is not None:
        return args.reps
    return 1 if args.quick or tokens > 2048 else (2 if tokens > 512 else 3)


def _fmt(x, digits=2):
    return "-" if x is None else f"{x:.{digits}f}"


def _summary(r: dict) -> dict:
    ok = not r.get("error") and not r.get("oom")
    peak = max(r["peak_mib"]) / 1024 if r.get("peak_mib") else None
    over = max(r["over_inputs_mib"]) / 1024 if r.get("over_inputs_mib") else None
    return {"ok": ok, "peak": peak, "over": over,
            "median": statistics.median(r["wall_s"]) if ok else None,
            "min": min(r["wall_s"]) if ok else None, "cpu": min(r["cpu_s"]) if ok else None}


def _table(results: list[dict]) -> list[str]:
    rows = ["| tokens | method | time median (s) | time min (s) | CPU min (s) | peak RSS (GiB) "
            "| peak over inputs (GiB) | over inputs vs naive | time min vs naive |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        s = _summary(r)
        base = next((_summary(x) for x in results if x["tokens"] == r["tokens"] and x["method"] == "naive"), None)
        mem_ratio = time_ratio = "-"
        if base and base["over"] and s["over"] is not None and (s["ok"] or base["ok"]):
            mem_ratio = ("≤ " if not base["ok"] and s["ok"] else "") + f"{s['over'] / base['over']:.3f}x"
        if base and base["min"] and s["min"]:
            time_ratio = f"{s['min'] / base['min']:.2f}x"
        note = ""
        if r.get("oom"):
            asked = re.search(r"allocate (\d+) bytes", r.get("error", ""))
            more = f", asking for {int(asked.group(1)) / GIB:.1f} GiB more" if asked else ""
            note = f" (out of memory at the {r['cap_gib']:.1f} GiB limit{more}: peak before failing)"
        elif r.get("error"):
            note = f" (failed: {r['error']})"
        rows.append(f"| {r['tokens']:,} | {r['method']}{note} | {_fmt(s['median'])} | {_fmt(s['min'])} "
                    f"| {_fmt(s['cpu'])} | {_fmt(s['peak'])} | {_fmt(s['over'])} | {mem_ratio} | {time_ratio} |")
    return rows


def report(results: list[dict], args, command: str, load: tuple) -> str:
    lines = [f"Command: `{command}`", "",
             f"Machine: {machine(args.threads)}. dtype {args.dtype}, V = {V:,}, H = {H}, "
             f"sequences of {SEQ_LEN} tokens"
             f"{'; LM-head weight frozen (no weight gradient)' if args.frozen_head else ''}.", "",
             f"Load average (1 min) before / after the run: {load[0]:.2f} / {load[1]:.2f}.", ""]
    lines += _table(results)
    lines += ["", *_targets(results)]
    return "\n".join(lines) + "\n"


def _targets(results: list[dict]) -> list[str]:
    """The issue's targets for ``steadyrl-fused``: peak at most 0.1x naive, time within 1.2x."""
    by = {(r["method"], r["tokens"]): _summary(r) for r in results}
    out = []
    for n in sorted({r["tokens"] for r in results}):
        f, b = by.get(("steadyrl-fused", n)), by.get(("naive", n))
        if not f or not b or not f["ok"] or b["over"] is None:
            continue
        bound = "" if b["ok"] else " (naive ran out of memory: its number is a lower bound)"
        ratio = f["over"] / b["over"]
        verdict = f"target ≤ 0.1x {'met' if ratio <= 0.1 else 'missed'}" if n == TARGET_TOKENS else \
            f"the target is set at {TARGET_TOKENS:,} tokens"
        out.append(f"- {n:,} tokens, peak over inputs: fused / naive = {ratio:.3f}x{bound}; {verdict}.")
        if b["ok"]:
            t = f["min"] / b["min"]
            out.append(f"- {n:,} tokens, time (min): fused / naive = {t:.2f}x; "
                       f"target ≤ 1.2x {'met' if t <= 1.2 else 'missed'}.")
    return out


def write_md(path: Path, body: str, dtype: str) -> None:
    """Replace this benchmark's generated block for ``dtype`` (or ``--md-key``) in ``path``; add it if missing."""
    start, end = MD_MARK.format(dtype=dtype, end="start"), MD_MARK.format(dtype=dtype, end="end")
    block = f"{start}\n{body}{end}"
    text = path.read_text() if path.exists() else (
        "# Benchmarks\n\nEvery number here comes with the command that produced it and the machine it "
        "ran on.\n")
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + f"\n\n## Log-probs ({dtype})\n\n" + block + "\n"
    path.write_text(text)


def _parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help=f"smoke run: {QUICK_TOKENS} tokens, one repetition")
    p.add_argument("--tokens", type=int, nargs="+", help=f"token counts (default {TOKENS})")
    p.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    p.add_argument("--reps", type=int, help="rounds of timed repetitions (default 3 at 512 tokens, 2 up to "
                   "2,048, then 1)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads in each child")
    p.add_argument("--mem-cap-gib", type=float, default=20.0, help="address-space limit of a child")
    p.add_argument("--mem-margin-gib", type=float, default=2.0, help="memory left free for others")
    p.add_argument("--timeout", type=int, default=900, help="seconds per child")
    p.add_argument("--write-md", metavar="PATH", help="write the result into this markdown file")
    p.add_argument("--md-key", help="name of the generated block in --write-md (default: the dtype)")
    p.add_argument("--frozen-head", action="store_true", help="the LM-head weight needs no gradient (LoRA)")
    p.add_argument("--child", choices=list(METHODS), help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    if args.child:
        res = measure(METHODS[args.child], args.tokens[0], args.reps, args.dtype, args.threads, args.frozen_head)
        print("RESULT " + json.dumps(res), flush=True)
        return 0
    command = "python -m benchmarks.bench_logprobs " + " ".join(sys.argv[1:] if argv is None else argv)
    tokens = args.tokens or (QUICK_TOKENS if args.quick else TOKENS)
    load0, results = os.getloadavg()[0], []
    for n in tokens:
        results += _collect(n, args)
    body = report(results, args, command.strip(), (load0, os.getloadavg()[0]))
    print("\n" + body, flush=True)
    if args.write_md:
        write_md(Path(args.write_md), body, args.md_key or args.dtype)
    return 0 if all(not r.get("error") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
