"""``steadyrl train`` / ``eval`` with tools and environments, end to end on a tiny model, and the
multi-turn inputs that must exit 2 before any model loads.

The environment run makes every episode two turns long (the environment ends it after its second
step), so observation tokens really go through generation, log-probs, the update and the
metrics; ``rollout/retokenize_drift`` must be 0 and the reward is the environment's.
"""

from __future__ import annotations

import json

import pytest
import yaml
from support import ADD_TOOL_SOURCE

ENV_SOURCE = '''
class TwoSteps:
    """Two turns per episode, 0.5 reward per turn; seeds recorded to check resume replays them."""

    def reset(self, prompt, answer, seed, **row):
        self.turn = 0
        return None

    def step(self, text):
        self.turn += 1
        return f"turn {self.turn} seen", 0.5, self.turn >= 2


class Dice:
    """A random game: every choice drawn from the seed reset() is given, so a resume replays it."""

    def reset(self, prompt, answer, seed, **row):
        import random

        self.rng = random.Random(seed)
        self.turns = self.rng.randint(1, 3)
        return f"You rolled {self.rng.randint(1, 6)}. {prompt}"

    def step(self, text):
        self.turns -= 1
        return f"Roll {self.rng.randint(1, 6)}", self.rng.random(), self.turns <= 0


class NoStep:
    def reset(self, **row):
        return None
'''

TOOLS_SOURCE = ADD_TOOL_SOURCE + '''

def undocumented(a: int) -> int:
    return a
'''

REWARD_SOURCE = '''
def has_turns(prompts, completions, turns, **columns):
    return [float(len(t) >= 1) for t in turns]
'''


@pytest.fixture(scope="session")
def agent_run(tmp_path_factory):
    from agents.templates import QWEN25, chat_tokenizer
    from steadyrl.demo.model import build_tiny_model

    root = tmp_path_factory.mktemp("agent_run")
    tokenizer = chat_tokenizer(QWEN25, bos="<|begin_of_text|>")  # the tiny model wants a BOS id; none is added
    model = build_tiny_model(tokenizer, n_layers=1, hidden_size=32, n_heads=2, seed=0, max_positions=2048)
    model.save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    rows = [{"prompt": f"What is {a}+{b}?", "answer": str(a + b)} for a in range(4) for b in range(3)]
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:8]))
    (root / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[8:]))
    (root / "env.py").write_text(ENV_SOURCE)
    (root / "tools.py").write_text(TOOLS_SOURCE)
    (root / "rewards.py").write_text(REWARD_SOURCE)
    base = {
        "model": {"name_or_path": str(root / "model")},
        "data": {"train_path": str(root / "train.jsonl"), "eval_path": str(root / "eval.jsonl")},
        "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 8,
                    "multi_turn": {"max_turns": 3, "max_observation_tokens": 40}},
        "trainer": {"max_steps": 2, "save_every": 0, "num_threads": 1, "samples_every": 1},
        "eval": {"num_samples": 2},
    }
    return root, base


def _write(root, base, name, multi_turn=None, **sections):
    """``base`` with ``sections`` merged in; ``multi_turn``: keys of rollout.multi_turn."""
    config = {k: dict(v) for k, v in base.items()}
    config["rollout"]["multi_turn"] = {**config["rollout"]["multi_turn"], **(multi_turn or {})}
    for section, values in sections.items():
        config.setdefault(section, {}).update(values) if isinstance(values, dict) else config.update({section: values})
    path = root / name
    path.write_text(yaml.safe_dump(config))
    return path


def _assert_documented(names: set[str]) -> None:
    """Every metric a run logs is in docs/metrics.md (``<name>``-style placeholders match one part)."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    patterns = [re.sub(r"<[a-z]+>", r"[^/]+", re.escape(m).replace(r"\<", "<").replace(r"\>", ">"))
                for m in re.findall(r"`([a-z_]+/[^`\s]+)`", text)]
    plain = {"step", "epoch"}
    missing = sorted(n for n in names - plain
                     if not n.startswith("eval/") and not any(re.fullmatch(p, n) for p in patterns))
    assert missing == []


def _metrics(out_dir):
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_environment_episodes_train_with_exact_tokens(agent_run, steadyrl_cli, tmp_path):
    root, base = agent_run
    cfg = _write(root, base, "env.yaml", multi_turn={"environment": f"{root / 'env.py'}:TwoSteps"},
                 rewards=[{"name": f"{root / 'rewards.py'}:has_turns", "weight": 0.0}])
    out = tmp_path / "run"
    proc = steadyrl_cli("train", str(cfg), "--output-dir", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = [m for m in _metrics(out) if "rollout/turns_mean" in m]
    assert len(steps) == 2
    for m in steps:
        # an episode ends with the environment's second step unless a turn ran out of tokens
        assert 1.0 <= m["rollout/turns_mean"] <= 2.0 and m["rollout/retokenize_drift"] == 0.0
        assert m["response/length_max"] <= 8 * 2  # the policy's tokens only: observations are not length
    _assert_documented({k for m in _metrics(out) for k in m})
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert samples
    for sample in samples:  # the environment saw every turn but one cut short (which ends the episode)
        sampled = sum(m["role"] == "assistant" for m in sample["turns"])
        cut = sample["truncated_by"] in ("max_new_tokens", "max_episode_tokens")
        assert sample["reward/environment"] == 0.5 * (sampled - cut)
        assert sample["reward/has_turns"] == float(sampled >= 1)
    summary = json.loads((out / "summary.json").read_text())
    assert "eval_after" in summary or any(k.startswith("eval") for k in summary)


@pytest.mark.slow
def test_tool_episodes_train(agent_run, steadyrl_cli, tmp_path, monkeypatch):
    root, base = agent_run
    # the template wraps a tool result in 53 tokens: the observation limit leaves room for content
    cfg = _write(root, base, "tools.yaml",
                 multi_turn={"tools": [f"{root / 'tools.py'}:add"], "max_observation_tokens": 64},
                 rewards=[{"name": "exact_match"}])
    out = tmp_path / "run"
    proc = steadyrl_cli("train", str(cfg), "--output-dir", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = [m for m in _metrics(out) if "rollout/turns_mean" in m]
    assert len(steps) == 2 and all(m["rollout/retokenize_drift"] == 0.0 for m in steps)
    assert all("rollout/tool_errors/add" in m for m in steps)
    # the run directory names a tool file: the user's own run (recorded by train) evaluates as it is ...
    own = steadyrl_cli("eval", "--output-dir", str(out))
    assert own.returncode == 0, own.stderr[-2000:]
    # ... and on a machine without that record (a run from elsewhere) it runs that code only when asked to
    elsewhere = tmp_path / "other-trust"
    elsewhere.mkdir(mode=0o700)
    monkeypatch.setenv("STEADYRL_TRUST_DIR", str(elsewhere))
    refused = steadyrl_cli("eval", "--output-dir", str(out))
    assert refused.returncode == 2 and "tool" in refused.stderr and "--trust-run-code" in refused.stderr
    trusted = steadyrl_cli("eval", "--output-dir", str(out), "--trust-run-code")
    assert trusted.returncode == 0, trusted.stderr[-2000:]
    assert json.loads(trusted.stdout[trusted.stdout.index("{"):])["num_prompts"] == 4


@pytest.mark.parametrize("rollout, needle", [
    ({"environment": "{root}/env.py:NoStep"}, "no step method"),
    ({"environment": "{root}/env.py:Missing"}, "rollout.multi_turn.environment"),
    ({"tools": ["{root}/tools.py:undocumented"]}, "rollout.multi_turn.tools[0]"),
    ({"tools": ["{root}/tools.py:add"], "tool_parser": "xml"}, "rollout.multi_turn.tool_parser"),
    ({"tools": ["{root}/tools.py:add"], "environment": "{root}/env.py:TwoSteps"}, "both set"),
    ({"environment": "{root}/env.py:TwoSteps", "max_episode_tokens": 1}, "cannot fit one turn"),
    ({"environment": "{root}/env.py:TwoSteps", "mode": "per_turn"}, "rollout.multi_turn.mode"),
    ({"tools": ["{root}/tools.py:add"], "max_observation_tokens": 40},
     "rollout.multi_turn.max_observation_tokens = 40: the chat template of"),
])
def test_bad_multi_turn_inputs_exit_2_naming_the_key(agent_run, steadyrl_cli, tmp_path, rollout, needle):
    root, base = agent_run
    rollout = {k: ([x.format(root=root) for x in v] if isinstance(v, list) else
                   v.format(root=root) if isinstance(v, str) else v) for k, v in rollout.items()}
    cfg = _write(root, base, "bad.yaml", multi_turn=rollout)
    proc = steadyrl_cli("train", str(cfg), "--output-dir", str(tmp_path / "run"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert needle in proc.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_a_tokenizer_without_a_chat_template_is_refused_for_tools(agent_run, tiny_run, steadyrl_cli, tmp_path):
    root, base = agent_run
    cfg = _write(root, base, "notemplate.yaml", model={"name_or_path": str(tiny_run.model)},
                 multi_turn={"tools": [f"{root / 'tools.py'}:add"]})
    proc = steadyrl_cli("train", str(cfg), "--output-dir", str(tmp_path / "run"))
    assert proc.returncode == 2 and "chat template" in proc.stderr, proc.stderr[-2000:]


def test_environment_runs_resume_exactly(agent_run, tmp_path):
    """Resumed from the checkpoint of step 2, a run with a random environment logs steps 3-4 exactly
    as the uninterrupted run did (the environments are seeded from trainer.seed, step and row)."""
    import support
    from steadyrl.tracking import read_jsonl
    from steadyrl.recipe import train

    root, base = agent_run
    cfg = _write(root, base, "dice.yaml", multi_turn={"environment": f"{root / 'env.py'}:Dice"},
                 trainer={"max_steps": 4, "save_every": 2, "samples_every": 0}, eval={"num_samples": 0})
    full = tmp_path / "full"
    train(str(cfg), [], output_dir=str(full))
    cut = support.crashed_copy(full, tmp_path / "cut", last_step=4, steps_kept=2)
    train(str(cfg), [], output_dir=str(cut), resume=True)

    def rows(run_dir):
        timing = ("time/", "throughput/", "rollout/env_time_s")
        return [{k: v for k, v in m.items() if not k.startswith(timing)} for m in read_jsonl(run_dir / "metrics.jsonl")]

    expected = rows(full)
    assert [m["step"] for m in expected if "reward/environment/mean" in m] == [1, 2, 3, 4]
    assert rows(cut) == expected


def _qwen3_model(root, tmp_path):
    import shutil

    from agents.templates import QWEN3, chat_tokenizer

    model = tmp_path / "qwen3_like"
    shutil.copytree(root / "model", model)
    chat_tokenizer(QWEN3, bos="<|begin_of_text|>").save_pretrained(model)
    return model


def test_a_template_that_re_renders_earlier_turns_is_refused_in_single_mode_naming_the_modes_that_work(
        agent_run, steadyrl_cli, tmp_path):
    """Qwen3's template drops earlier turns' <think> blocks once a user message follows them: with
    user-role observations one sequence would not be what the template shows, so
    ``rollout.multi_turn.mode: single`` stops at start-up naming the behaviour and the modes that handle it."""
    root, base = agent_run
    cfg = _write(root, base, "qwen3.yaml", model={"name_or_path": str(_qwen3_model(root, tmp_path))},
                 multi_turn={"environment": f"{root / 'env.py'}:TwoSteps", "observation_role": "user",
                          "mode": "single"})
    proc = steadyrl_cli("train", str(cfg), "--output-dir", str(tmp_path / "run"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "re-renders earlier assistant turns" in proc.stderr and "<think>" in proc.stderr
    assert "rollout.multi_turn.mode: stepwise" in proc.stderr and "rollout.multi_turn.mode: as_sampled" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("mode", ["auto", "as_sampled"])
def test_a_thinking_template_trains_in_multi_turn(agent_run, tmp_path, mode):
    """The same template trains: auto picks stepwise (each turn a sample of the template's rendering
    of its history), as_sampled one sequence as sampled; drift 0 either way, reward per episode."""
    from steadyrl.tracking import read_jsonl
    from steadyrl.recipe import train

    root, base = agent_run
    cfg = _write(root, base, f"qwen3_{mode}.yaml", model={"name_or_path": str(_qwen3_model(root, tmp_path))},
                 multi_turn={"environment": f"{root / 'env.py'}:TwoSteps", "observation_role": "user",
                          "mode": mode},
                 trainer={"max_steps": 1, "save_every": 0, "num_threads": 1, "samples_every": 0},
                 eval={"num_samples": 0})
    train(str(cfg), [], output_dir=str(tmp_path / "run"))
    steps = [m for m in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "rollout/turns_mean" in m]
    assert len(steps) == 1 and steps[0]["rollout/retokenize_drift"] == 0.0
    # the environment's reward is per episode (0.5 a turn), whatever the samples are
    assert steps[0]["reward/environment/mean"] == pytest.approx(0.5 * steps[0]["rollout/turns_mean"], abs=0.5)
    assert steps[0]["response/length_max"] <= (8 if mode == "auto" else 16)  # a turn's tokens / an episode's
