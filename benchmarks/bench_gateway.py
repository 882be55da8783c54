"""The gateway's overhead: the tool demo's episodes through ``rollout.multi_turn.agent`` vs the episode driver.

    python -m benchmarks.bench_gateway                 # warm start + 5 rounds of each (~3 min on 2 loaded cores)
    python -m benchmarks.bench_gateway --quick         # one round, smaller warm start
    python -m benchmarks.bench_gateway --lockout       # keyless sockets vs the key holder (no model, ~10 s)

The task is ``steadyrl train demo.task=tool``'s: ``What is 579*77?`` with a calculator tool, the
demo's tiny chat model warm-started until it calls the tool (``demo.tool_skill_steps``), two turns
at most. The same prompts are rolled out two ways, alternating, from the same model:

* **driver**: :func:`steadyrl.rollout.driver.rollout` with the demo's ``ToolAgent`` (the calculator in
  the trainer's process, ``rollout.multi_turn.tool_isolation: inline``, as the agent below runs it);
* **gateway**: the same call with ``rollout.multi_turn.agent: examples/calculator_agent.py:run_episode``: an
  ``async def`` using ``openai.AsyncOpenAI``, offering the calculator with ``tools=``, running the
  calls itself and sending the results back; the gateway batches every episode's call into one
  generate per wave.

Measured: the rollout's wall time per step (a step's update is the same for both, so this is the
strictest ratio; the step-time ratio is lower), and for the gateway the episodes per second with
64 episodes running at once (``rollout.multi_turn.agent_concurrency: 64``, 16 prompts x 4).
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
HTTP_AGENT = f"{REPO / 'benchmarks' / 'gateway_agents.py'}:run_episode"
AGENTS = {"gateway": AGENT, "gateway-http": HTTP_AGENT}


def _setup(quick: bool):
    from steadyrl.assembly.agent import build_agent
    from steadyrl.assembly.prompts import prompt_options
    from steadyrl.config import load_config
    from steadyrl.data.prompts import prepare_prompts
    from steadyrl.demo.tool_demo import build_tool_demo
    from steadyrl.demo.tool_task import make_tool_splits
    from steadyrl.rollout.hf import HFEngine

    overrides = ["demo.task=tool", f"demo.tool_skill_steps={60 if quick else 300}", "rollout.multi_turn.tool_isolation=inline"]
    config = load_config(None, overrides)
    train, _ = make_tool_splits(2000, 10, seed=0)
    model, tokenizer, info = build_tool_demo(config.demo, train, seed=0)
    driver = build_agent(config, tokenizer)
    agents = {"driver": driver}
    for name, spec in AGENTS.items():
        overrides_for = [*overrides, "rollout.multi_turn.tools=[]", f"rollout.multi_turn.agent={spec}"]
        agents[name] = build_agent(load_config(None, overrides_for), tokenizer)
    prompts, _ = prepare_prompts(train[:64], tokenizer, prompt_options(config, driver), source="bench")
    return config, HFEngine(model, tokenizer), tokenizer, agents, prompts


def _time(fn, cpu: list | None = None) -> tuple[float, object]:
    """Wall seconds of ``fn()`` and its result; the process's CPU seconds (every thread) appended to ``cpu``."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    if cpu is not None:
        cpu.append(time.process_time() - c0)
    return time.perf_counter() - t0, out


def train_steps(steps: int, skill_steps: int, out: Path) -> dict[str, dict[str, float]]:
    """``steadyrl train demo.task=tool`` with the driver and with the agent, one after the other:
    the median ``time/step_s`` and ``time/generate_s`` of steps 2.. (step 1 warms up)."""
    from steadyrl.tracking import read_jsonl
    from steadyrl.recipe import train

    common = ["demo.task=tool", f"demo.tool_skill_steps={skill_steps}", f"trainer.max_steps={steps}", "demo.num_eval=16",
              "trainer.eval_every=0", "rollout.multi_turn.tool_isolation=inline", "trainer.save_every=0"]
    runs = {"driver": common, **{name: [*common, "rollout.multi_turn.tools=[]", f"rollout.multi_turn.agent={spec}"]
                                 for name, spec in AGENTS.items()}}
    result = {}
    for name, overrides in runs.items():
        train(None, overrides, output_dir=str(out / name), overwrite=True)
        rows = [r for r in read_jsonl(out / name / "metrics.jsonl") if "time/step_s" in r][1:]
        result[name] = {k: statistics.median(r[k] for r in rows) for k in ("time/step_s", "time/generate_s")}
    return result


KEYLESS = b"GET /e/tok/v1/models HTTP/1.1\r\nHost: x\r\n\r\n"


def _still_open(sockets) -> int:
    """How many of ``sockets`` the server has not closed (nothing to read, or unread bytes; not EOF or reset)."""
    import select
    import socket

    alive = 0
    for s in sockets:
        poll = select.poll()  # select() cannot take descriptors past 1,024
        poll.register(s, select.POLLIN)
        if not poll.poll(0):
            alive += 1
            continue
        try:
            alive += s.recv(1, socket.MSG_PEEK) != b""  # b"": closed by the server
        except OSError:
            pass
    return alive


def _key_holder_calls(g, n: int) -> tuple[list, list[float]]:
    """``n`` calls with the key, each on a fresh connection (as a client whose pool was closed):
    their statuses (``conn`` for a connection error) and latencies in ms."""
    import json
    import urllib.error
    import urllib.request

    statuses, ms = [], []
    for _ in range(n):
        request = urllib.request.Request(g.base_url("tok") + "/chat/completions", method="POST",
                                         data=b'{"messages": [{"role": "user", "content": "hi"}]}',
                                         headers={"Authorization": f"Bearer {g.api_key}"})
        t0 = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                statuses.append(response.status if json.loads(response.read()) == {"ok": True} else "bad")
        except urllib.error.HTTPError as err:
            statuses.append(err.code)
        except OSError:
            statuses.append("conn")
        ms.append(1000 * (time.perf_counter() - t0))
    return statuses, ms


def lockout(keyless: int, calls: int, concurrency: int) -> None:
    """The issue's lock-out at the default cap: ``keyless`` sockets without the key (half sent a
    request and were refused, half sent nothing), held open; then ``calls`` calls with the key, and
    as many again while a thread keeps opening keyless sockets as fast as it can."""
    import resource
    import socket
    import threading

    from steadyrl.gateway.server import Gateway, ServerLimits

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 8192 if hard == resource.RLIM_INFINITY else min(hard, 8192)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))  # both ends of every socket are ours
    g = Gateway(ServerLimits.for_concurrency(concurrency))
    g.submit = lambda token, request: (200, {"ok": True})
    held = []
    for i in range(keyless):
        s = socket.create_connection(("127.0.0.1", g.port), timeout=10)
        if i % 2 == 0:
            s.sendall(KEYLESS)
            s.recv(65536)  # the 401
        held.append(s)
    time.sleep(0.2)
    print(f"cap {g.limits.max_connections} connections (rollout.multi_turn.agent_concurrency {concurrency}); "
          f"{keyless} keyless sockets opened, {_still_open(held)} still open")
    quiet, quiet_ms = _key_holder_calls(g, calls)
    stop, flood = threading.Event(), []

    def attacker():
        while not stop.is_set():
            try:
                flood.append(socket.create_connection(("127.0.0.1", g.port), timeout=10))
            except OSError:
                continue
            if len(flood) > keyless:
                flood.pop(0).close()

    thread = threading.Thread(target=attacker, daemon=True)
    t0, opened = time.perf_counter(), len(flood)
    thread.start()
    time.sleep(0.5)
    loud, loud_ms = _key_holder_calls(g, calls)
    stop.set()
    thread.join(timeout=10)
    rate = (len(flood) - opened) / (time.perf_counter() - t0)
    for name, statuses, ms in (("quiet", quiet, quiet_ms), ("during the flood", loud, loud_ms)):
        print(f"key holder, {name}: {statuses.count(200)}/{len(statuses)} calls answered 200 "
              f"(others: {sorted({str(x) for x in statuses if x != 200})}), median {statistics.median(ms):.1f} ms, "
              f"max {max(ms):.1f} ms")
    print(f"flood: ~{rate:.0f} keyless connections/s kept open (the newest {keyless}); server pushed out "
          f"{getattr(getattr(g._server, 'slots', None), 'evicted', 'n/a')}, refused {g._server.refused_connections}")
    for s in held + flood:
        s.close()
    g.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=8, help="training steps of each run (0: no training runs)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/steadyrl-bench-gateway"))
    parser.add_argument("--lockout", action="store_true", help="only the lock-out check: keyless sockets vs the key")
    args = parser.parse_args(argv)
    if args.lockout:
        lockout(keyless=600, calls=35, concurrency=256)
        return 0
    torch.set_num_threads(1)
    from steadyrl.rollout.driver import rollout
    from steadyrl.rollout.episodes import episode_metrics

    config, engine, tokenizer, agents, prompts = _setup(args.quick)
    ro = config.rollout
    sampling = {"temperature": ro.temperature, "top_p": ro.top_p, "top_k": ro.top_k}
    rounds = 1 if args.quick else args.rounds
    times = {name: [] for name in agents}
    cpu = {name: [] for name in agents}
    calls = {name: [] for name in agents}
    step_prompts = prompts[:ro.prompts_per_step]  # the demo's step: 16 prompts x 8
    for r in range(rounds + 1):  # round 0 warms every path up and is not counted
        for name, agent in agents.items():  # interleaved: the machine's load falls on all alike
            torch.manual_seed(r)
            spent = cpu[name] if r else []
            seconds, gen = _time(lambda: rollout(engine, tokenizer, agent, step_prompts, ro.group_size, ro,
                                                 seeds=list(range(len(step_prompts) * ro.group_size)), **sampling),
                                 spent)
            if r:
                times[name].append(seconds)
                calls[name].append(episode_metrics(gen.episodes)["rollout/tool_calls_per_episode"])
    print(f"episodes per step: {len(step_prompts) * ro.group_size} ({len(step_prompts)} prompts x {ro.group_size}); "
          f"rounds: {rounds}")
    base, base_cpu = statistics.median(times["driver"]), statistics.median(cpu["driver"])
    for name in agents:
        m, c = statistics.median(times[name]), statistics.median(cpu[name])
        print(f"{name:13s} rollout s/step: median {m:.3f} ({m / base:.2f}x the driver; all "
              f"{[round(t, 3) for t in times[name]]}); CPU s/step {c:.3f} ({c / base_cpu:.2f}x); "
              f"tool calls/episode {statistics.mean(calls[name]):.2f}")
    for name in AGENTS:
        gateway = agents[name]
        gateway.concurrency = 64
        torch.manual_seed(100)
        wide, gen = _time(lambda: rollout(engine, tokenizer, gateway, prompts[:16], 4, ro, seeds=list(range(64)),
                                          **sampling))
        errors = sorted({e.error for e in gen.episodes if e.failed})
        print(f"{name}: 64 concurrent agents: 64 episodes in {wide:.2f} s = {64 / wide:.1f} episodes/s, "
              f"{gateway.generate_calls} generate calls, {len(errors)} failed {errors[:2]}")
    for agent in agents.values():
        agent.shutdown()
    if args.steps:
        steps = train_steps(2 if args.quick else args.steps, 60 if args.quick else 300, args.out)
        d = steps["driver"]
        for name, g in steps.items():
            print(f"{name:13s} train step (median of steps 2..): {g['time/step_s']:.3f} s (generate "
                  f"{g['time/generate_s']:.3f} s); {g['time/step_s'] / d['time/step_s']:.2f}x the driver's step")
        rest = d["time/step_s"] - d["time/generate_s"]  # scoring and the update: the same work for every agent
        for name in AGENTS:
            for what, spent in (("wall", times), ("CPU", cpu)):
                mine, base = statistics.median(spent[name]), statistics.median(spent["driver"])
                print(f"{name:13s} step from the interleaved rollouts ({what}) + the driver's scoring and update "
                      f"({rest:.3f} s): {(rest + mine) / (rest + base):.2f}x the driver's step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
