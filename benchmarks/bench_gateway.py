"""The gateway's overhead: the tool demo's episodes through ``rollout.agent`` vs the episode driver.

    python -m benchmarks.bench_gateway                 # warm start + 5 rounds of each (~3 min on 2 loaded cores)
    python -m benchmarks.bench_gateway --quick         # one round, smaller warm start

The task is ``steadyrl train demo.task=tool``'s: ``What is 579*77?`` with a calculator tool, the
demo's tiny chat model warm-started until it calls the tool (``demo.tool_skill_steps``), two turns
at most. The same prompts are rolled out two ways, alternating, from the same model:

* **driver**: :func:`steadyrl.rollout.driver.rollout` with the demo's ``ToolAgent`` (the calculator in
  the trainer's process, ``rollout.tool_isolation: inline``, as the agent below runs it);
* **gateway**: the same call with ``rollout.agent: examples/calculator_agent.py:run_episode``: an
  ``async def`` using ``openai.AsyncOpenAI``, offering the calculator with ``tools=``, running the
  calls itself and sending the results back; the gateway batches every episode's call into one
  generate per wave.

Measured: the rollout's wall time per step (a step's update is the same for both, so this is the
strictest ratio; the step-time ratio is lower), and for the gateway the episodes per second with
64 episodes running at once (``rollout.agent_concurrency: 64``, 16 prompts x 4).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
AGENT = f"{REPO / 'examples' / 'calculator_agent.py'}:run_episode"


def _setup(quick: bool):
    from steadyrl.agents.build import build_agent
    from steadyrl.build.prompts import prompt_options
    from steadyrl.config import load_config
    from steadyrl.data.prompts import prepare_prompts
    from steadyrl.demo.tool_demo import build_tool_demo
    from steadyrl.demo.tool_task import make_tool_splits
    from steadyrl.rollout.hf import HFEngine

    overrides = ["demo.task=tool", f"demo.tool_skill_steps={60 if quick else 300}", "rollout.tool_isolation=inline"]
    config = load_config(None, overrides)
    train, _ = make_tool_splits(2000, 10, seed=0)
    model, tokenizer, info = build_tool_demo(config.demo, train, seed=0)
    driver = build_agent(config, tokenizer)
    gateway_config = load_config(None, [*overrides, "rollout.tools=[]", f"rollout.agent={AGENT}"])
    gateway = build_agent(gateway_config, tokenizer)
    prompts, _ = prepare_prompts(train[:64], tokenizer, source="bench", **prompt_options(config, driver))
    return config, HFEngine(model, tokenizer), tokenizer, driver, gateway, prompts


def _time(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def train_steps(steps: int, skill_steps: int, out: Path) -> dict[str, dict[str, float]]:
    """``steadyrl train demo.task=tool`` with the driver and with the agent, one after the other:
    the median ``time/step_s`` and ``time/generate_s`` of steps 2.. (step 1 warms up)."""
    from steadyrl.tracking import read_jsonl
    from steadyrl.trainer import train

    common = ["demo.task=tool", f"demo.tool_skill_steps={skill_steps}", f"trainer.max_steps={steps}",
              "trainer.eval_every=0", "rollout.tool_isolation=inline", "trainer.save_every=0"]
    runs = {"driver": common, "gateway": [*common, "rollout.tools=[]", f"rollout.agent={AGENT}"]}
    result = {}
    for name, overrides in runs.items():
        train(None, overrides, output_dir=str(out / name), overwrite=True)
        rows = [r for r in read_jsonl(out / name / "metrics.jsonl") if "time/step_s" in r][1:]
        result[name] = {k: statistics.median(r[k] for r in rows) for k in ("time/step_s", "time/generate_s")}
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=8, help="training steps of each run (0: no training runs)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/steadyrl-bench-gateway"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    from steadyrl.rollout.driver import rollout
    from steadyrl.rollout.episodes import episode_metrics

    config, engine, tokenizer, driver, gateway, prompts = _setup(args.quick)
    ro = config.rollout
    sampling = {"temperature": ro.temperature, "top_p": ro.top_p, "top_k": ro.top_k}
    rounds = 1 if args.quick else args.rounds
    times = {"driver": [], "gateway": []}
    calls = {"driver": [], "gateway": []}
    step_prompts = prompts[:ro.prompts_per_step]  # the demo's step: 8 prompts x 8
    for r in range(rounds + 1):  # round 0 warms both paths up and is not counted
        for name, agent in (("driver", driver), ("gateway", gateway)):
            torch.manual_seed(r)
            seconds, gen = _time(lambda: rollout(engine, tokenizer, agent, step_prompts, ro.group_size, ro,
                                                 seeds=list(range(len(step_prompts) * ro.group_size)), **sampling))
            if r:
                times[name].append(seconds)
                calls[name].append(episode_metrics(gen.episodes)["rollout/tool_calls_per_episode"])
    gateway.concurrency = 64
    torch.manual_seed(100)
    wide, gen = _time(lambda: rollout(engine, tokenizer, gateway, prompts[:16], 4, ro, seeds=list(range(64)),
                                      **sampling))
    failed = sum(e.failed for e in gen.episodes)
    errors = sorted({e.error for e in gen.episodes if e.failed})
    if errors:
        print("failed episodes:", errors[:3])
    d, g = statistics.median(times["driver"]), statistics.median(times["gateway"])
    print(f"episodes per step: {len(step_prompts) * ro.group_size} ({len(step_prompts)} prompts x {ro.group_size}); "
          f"rounds: {rounds}")
    print(f"driver  rollout s/step: median {d:.3f} (all {[round(t, 3) for t in times['driver']]}), "
          f"tool calls/episode {statistics.mean(calls['driver']):.2f}")
    print(f"gateway rollout s/step: median {g:.3f} (all {[round(t, 3) for t in times['gateway']]}), "
          f"tool calls/episode {statistics.mean(calls['gateway']):.2f}")
    print(f"gateway / driver: {g / d:.2f}x")
    print(f"64 concurrent agents: 64 episodes in {wide:.2f} s = {64 / wide:.1f} episodes/s, "
          f"{gateway.generate_calls} generate calls, {failed} failed")
    gateway.shutdown()
    driver.shutdown()
    if args.steps:
        steps = train_steps(2 if args.quick else args.steps, 60 if args.quick else 300, args.out)
        d, g = steps["driver"], steps["gateway"]
        print(f"train step (median of steps 2..): driver {d['time/step_s']:.3f} s (generate {d['time/generate_s']:.3f}), "
              f"gateway {g['time/step_s']:.3f} s (generate {g['time/generate_s']:.3f}); "
              f"step ratio {g['time/step_s'] / d['time/step_s']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
