"""docs/metrics.md is the list of what ``metrics.jsonl`` holds: every name listed once, every key a
run logs documented (a family with a variable part, such as ``reward/<name>/mean``, as that
pattern), and every plainly named metric logged by one of the tiny runs here, except the few that
need what these runs lack (``NOT_RUN_HERE``, each with the test that logs it).

The runs cover GRPO with a KL loss and clipping, PPO with a KL reward, the token budget with
padding-free micro-batches, dynamic sampling, asynchronous rollouts, and multi-turn episodes with
tools, with an environment and with an agent through the gateway; two steps each on the tiny model, a few seconds in all.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support import ADD_TOOL_SOURCE

from steadyrl.tracking import read_jsonl

DOCS = Path(__file__).resolve().parents[2] / "docs"

# plainly named metrics that only runs these tests do not make can log, and where they are logged
NOT_RUN_HERE = {
    "reward/unrouted": "reward domains (tests/cli/test_domains.py)",
    "reward/code/tests": "the code reward (tests/rewards/test_code_reward.py)",
    "reward/code/pass_rate": "the code reward",
    "reward/code/network_isolated": "the code reward",
    "reward/code/readonly_fs": "the code reward",
    "reward/code/separate_user": "the code reward",
    "reward/code/isolation_level": "the code reward",
    "rollout/images_per_step": "a vision-language policy (tests/vision/test_vision_rollout.py)",
    "rollout/image_tokens_per_sample": "a vision-language policy (tests/vision/test_vision_rollout.py)",
    "rollout/weight_sync_max_diff": "rollout.dtype's engine copy (tests/trainer/test_precision_engine.py)",
    "rollout/weight_sync_changed_frac": "rollout.dtype's engine copy (tests/trainer/test_precision_engine.py)",
    "distill/reverse_kl": "on-policy distillation with a teacher (tests/trainer/test_distillation.py)",
    "distill/teacher_logprob_mean": "on-policy distillation with a teacher",
    "actor/gate_mean": "policy_loss: sapo (tests/trainer/test_new_algorithms.py)",
    "actor/cov_selected_frac": "policy_loss: kl_cov / clip_cov (tests/trainer/test_new_algorithms.py)",
    "actor/entropy_selected_frac": "algorithm.top_entropy_quantile (tests/trainer/test_new_algorithms.py)",
    "critic/overlong_frac": "algorithm.overlong_buffer (tests/trainer/test_new_algorithms.py)",
    "critic/overlong_penalty_mean": "algorithm.overlong_buffer (tests/trainer/test_new_algorithms.py)",
}


ENVIRONMENT = '''
class TwoSteps:
    def reset(self, prompt, answer, seed, **row):
        return None

    def step(self, text):
        return "seen", 0.5, True
'''

AGENT = '''
import json, urllib.request


def run_episode(row, base_url, api_key):
    body = {"messages": row["prompt"] if isinstance(row["prompt"], list) else [{"role": "user", "content": row["prompt"]}]}
    request = urllib.request.Request(base_url + "/chat/completions", data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": "Bearer " + api_key})
    with urllib.request.urlopen(request, timeout=60) as response:
        json.loads(response.read())
    return 0.5
'''


def documented() -> list[str]:
    """The backticked names of the first column of the metrics table, in order."""
    names = []
    for line in (DOCS / "metrics.md").read_text().splitlines():
        if line.startswith("| `"):
            names += re.findall(r"`([^`]+)`", line.split("|")[1])
    return names


def _pattern(name: str) -> re.Pattern:
    """``reward/<name>/mean`` -> a pattern whose ``<...>`` matches one path part."""
    return re.compile("[^/]+".join(re.escape(part) for part in re.split(r"<[a-z]+>", name)))


def test_every_metric_is_listed_once():
    names = documented()
    assert len(names) > 100
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_the_unknown_tool_error_is_documented_with_the_parse_error():
    row = next(line for line in (DOCS / "metrics.md").read_text().splitlines() if "`rollout/tool_errors`" in line)
    assert "`parse`" in row and "`unknown`" in row


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    """A tiny model whose tokenizer has a chat template (tools need one), its prompts, a tools file
    and an environment file."""
    from agents.templates import QWEN25, chat_tokenizer
    from steadyrl.demo.model import build_tiny_model

    root = tmp_path_factory.mktemp("chat_model")
    tokenizer = chat_tokenizer(QWEN25, bos="<|begin_of_text|>")
    model = build_tiny_model(tokenizer, n_layers=1, hidden_size=32, n_heads=2, seed=0, max_positions=2048)
    model.save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    rows = [{"prompt": f"What is {a}+{b}?", "answer": str(a + b)} for a in range(4) for b in range(2)]
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "tools.py").write_text(ADD_TOOL_SOURCE)
    (root / "env.py").write_text(ENVIRONMENT)
    (root / "agent.py").write_text(AGENT)
    return root


def _runs(task_dir: Path, chat: Path) -> dict[str, tuple[dict, list[str]]]:
    """name -> (sections merged into the tiny config, overrides)."""
    dense = [{"name": f"{task_dir / 'rewards.py'}:partial_reverse"}]
    multi_turn = {"model": {"name_or_path": str(chat / "model")},
                  "data": {"train_path": str(chat / "train.jsonl"), "eval_path": str(chat / "train.jsonl")},
                  "rewards": [{"name": "exact_match"}]}
    return {
        "grpo": ({"rewards": dense, "eval": {"num_samples": 2}},
                 ["algorithm.reward_clip=0.5", "algorithm.advantage_clip=2", "algorithm.difficulty_mask=true",
                  "algorithm.difficulty_low=0.0", "algorithm.difficulty_high=1.0"]),
        "ppo": ({"rewards": dense}, ["algorithm.preset=ppo", "algorithm.kl_mode=reward"]),
        "packed": ({"rewards": dense}, ["trainer.max_tokens_per_micro_batch=64", "trainer.padding_free=true"]),
        "dynamic": ({}, ["algorithm.dynamic_sampling=true"]),  # exact match: no sample of a tiny model is right
        "asynchronous": ({"rewards": dense}, ["rollout.asynchronous.max_staleness=1"]),
        "tools": ({**multi_turn, "rollout": {"multi_turn": {"tools": [f"{chat / 'tools.py'}:add"], "max_turns": 2}}}, []),
        "environment": ({**multi_turn, "rollout": {"multi_turn": {"environment": f"{chat / 'env.py'}:TwoSteps",
                                                                 "max_turns": 2}}}, []),
        "agent": ({**multi_turn, "rollout": {"multi_turn": {"agent": f"{chat / 'agent.py'}:run_episode",
                                                           "max_episode_tokens": 64}}}, []),
    }


@pytest.fixture(scope="module")
def logged(tiny_model_dir, task_dir, chat_model, tmp_path_factory) -> dict[str, set[str]]:
    """run name -> every key of its metrics.jsonl."""
    import support
    from steadyrl.recipe import train

    root = tmp_path_factory.mktemp("metric_runs")
    base = {
        "model": {"name_or_path": str(tiny_model_dir)},
        "data": {"train_path": str(task_dir / "train.jsonl"), "eval_path": str(task_dir / "eval.jsonl")},
        "rewards": [{"name": "exact_match"}],
        "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 6},
        "trainer": {"max_steps": 2, "save_every": 0, "samples_every": 0, "micro_batch_size": 4,
                    "device": "cpu", "num_threads": 1},
        "eval": {"num_samples": 0},
    }
    keys = {}
    for name, (sections, overrides) in _runs(task_dir, chat_model).items():
        config = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
        for section, values in sections.items():
            if section == "rollout":
                config["rollout"] = {**config["rollout"], **values}
            else:
                config[section] = values
        path = support.config_writer(config, root / f"{name}.yaml")()
        train(str(path), overrides, output_dir=str(root / name), overwrite=True)
        keys[name] = {k for row in read_jsonl(root / name / "metrics.jsonl") for k in row}
    return keys


RUNS = ["grpo", "ppo", "packed", "dynamic", "asynchronous", "tools", "environment", "agent"]


@pytest.mark.parametrize("run", RUNS)
def test_every_logged_metric_is_documented(logged, run):
    patterns = [_pattern(n) for n in documented()]
    assert len(logged[run]) > 20
    assert sorted(k for k in logged[run] if not any(p.fullmatch(k) for p in patterns)) == []


def test_every_plainly_named_metric_is_logged_by_some_run(logged):
    everything = set().union(*logged.values())
    plain = [n for n in documented() if "<" not in n]
    assert sorted(n for n in plain if n not in everything and n not in NOT_RUN_HERE) == []
    assert sorted(n for n in NOT_RUN_HERE if n not in plain) == []  # the exceptions are documented ones


@pytest.mark.parametrize(("run", "family"), [
    ("ppo", ("critic/values_mean", "critic/value_loss", "critic/explained_variance", "critic/vf_clipfrac",
             "critic/grad_norm")),
    ("grpo", ("actor/kl_loss", "kl/coef", "kl/k3", "batch/difficulty_kept_frac", "eval/pass@1", "eval/pass@2")),
    ("packed", ("actor/pg_loss", "actor/kl_loss", "actor/ratio_max", "health/empty_minibatches")),
    ("dynamic", ("dynamic/draws", "dynamic/refilled_frac", "dynamic/filtered_groups/equal_scores",
                 "dynamic/short_groups", "batch/no_valid_sample")),
    ("asynchronous", ("rollout/staleness_mean", "rollout/policy_version", "rollout/tis_weight_mean",
                      "time/rollout_wait_s")),
    ("tools", ("rollout/turns_mean", "rollout/turns_max", "rollout/tool_calls", "rollout/tool_errors",
               "rollout/tool_errors/add", "rollout/observation_tokens_mean", "rollout/truncated/max_turns",
               "rollout/retokenize_drift")),
    ("environment", ("rollout/turns_mean", "rollout/env_time_s", "rollout/failed_episodes",
                     "reward/environment/mean", "reward/environment/failed")),
    ("agent", ("rollout/agent/calls", "rollout/agent/non_append_calls", "rollout/agent/off_policy_calls",
               "rollout/agent/timeouts", "rollout/agent/errors", "reward/agent/mean", "reward/agent/failed")),
])
def test_each_configuration_logs_its_own_metrics(logged, run, family):
    assert sorted(set(family) - logged[run]) == []
