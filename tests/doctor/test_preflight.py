"""``steadyrl doctor CONFIG``: the pre-flight measures the gap between the engine's log-probs and the
trainer's on a few sampled batches and names its cause first: a bfloat16 engine, a top-k engine that
reports untruncated log-probs, a chat template that renders a sampled turn back to other ids, stale
engine weights. A matched setup is healthy in one line; bad input exits 2; nothing is written."""

from __future__ import annotations

import copy
import json

import pytest
import torch
import yaml

from steadyrl.cli import main
from steadyrl.config import load_config
from steadyrl.preflight.attribution import attribute
from steadyrl.preflight.gap import build_side

torch.set_num_threads(1)

REVERSING_TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'user' %}U:{{ m['content'] }}\n"
                      "{% else %}A:{{ m['content'] | reverse }}{{ eos_token }}{% endif %}{% endfor %}"
                      "{% if add_generation_prompt %}A:{% endif %}")
"""A template that renders the assistant's turn reversed: sampled text does not come back as its ids."""


def _config(tmp_path, model_dir, **rollout):
    rows = [{"prompt": p, "answer": p[::-1]} for p in ("abc", "hgf", "deed", "cab")]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {"model": {"name_or_path": str(model_dir)}, "data": {"train_path": str(tmp_path / "train.jsonl")},
              "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 8, **rollout}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def chat_model_dir(tmp_path_factory):
    from steadyrl.demo.model import build_tiny_model
    from steadyrl.demo.tokenizer import build_char_tokenizer

    directory = tmp_path_factory.mktemp("reversing_template")
    tokenizer = build_char_tokenizer("abcdefgh=UA:\n")
    tokenizer.chat_template = REVERSING_TEMPLATE
    build_tiny_model(tokenizer, n_layers=1, hidden_size=32, n_heads=2, seed=0).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def _first(path, overrides=(), tolerance=1e-4, **kwargs):
    side = build_side(load_config(str(path), list(overrides)), batches=2, prompts=2, **kwargs)
    result = attribute(side, tolerance)
    assert result.causes, result.ruled_out
    return result


def test_a_matched_setup_is_healthy_in_one_line_and_exits_0(tmp_path, tiny_model_dir, capsys):
    before = sorted(p.name for p in tmp_path.iterdir())
    config = _config(tmp_path, tiny_model_dir)
    assert main(["doctor", str(config)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"healthy: {config}: ") and out.count("\n") == 1
    assert "stale weights (checksums equal)" in out and "8 of 8 samples re-encode to the sampled ids" in out
    assert "Rewards on the sampled completions: reward 'math': mean 0 over 8 of 8 sampled completions." in out
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before + ["config.yaml", "train.jsonl"])


def test_a_bfloat16_engine_is_named_first_as_precision(tmp_path, tiny_model_dir, capsys):
    config = _config(tmp_path, tiny_model_dir, dtype="bfloat16")
    result = _first(config)
    assert result.causes[0].name == "precision" and result.causes[0].share > 0.5
    assert "rollout.dtype=null (now bfloat16)" in result.causes[0].change
    assert main(["doctor", str(config), "--tolerance", "1e-4"]) == 1
    out = capsys.readouterr().out
    assert "1. Precision (engine dtype) (`precision`): " in out and "k3 " in out and "ess " in out


def test_a_top_k_engine_reporting_untruncated_logprobs_is_named_first_as_sampling(tmp_path, tiny_model_dir):
    result = _first(_config(tmp_path, tiny_model_dir, top_k=3))
    first = result.causes[0]
    assert first.name == "sampling" and first.share > 0.9
    assert "reports the untruncated ones" in first.evidence and "rollout.top_k=0" in first.change
    assert result.reported.startswith("unprocessed")  # what the engine reports hides the gap
    assert float(result.reported.split("|log-ratio| ")[1].split()[0]) < 0.01 < result.baseline


def test_a_template_that_does_not_round_trip_is_named_first(tmp_path, chat_model_dir):
    result = _first(_config(tmp_path, chat_model_dir), ["data.chat_template=true"])
    first = result.causes[0]
    assert first.name == "template", [(c.name, c.gap) for c in result.causes]
    assert "of 8 samples do not come back as the sampled ids" in first.evidence
    assert result.baseline < 1e-4  # the engine and the trainer agree on the ids themselves


def test_stale_engine_weights_are_named_first_by_checksum(tmp_path, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    stale = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        for p in stale.parameters():
            p.add_(0.05 * torch.randn_like(p))  # an update the engine never received
    result = _first(_config(tmp_path, tiny_model_dir), engine_weights=copy.deepcopy(stale))
    first = result.causes[0]
    assert first.name == "stale_weights" and first.share > 0.9
    assert "checksum of the engine's weights" in first.evidence


@pytest.mark.parametrize("args, needle", [
    (["{config}", "rollout.top_k=-1"], "rollout.top_k"),
    (["{config}", "--batches", "0"], "--batches 0: give a whole number >= 1"),
    (["{config}", "--set", "min_steps=2"], "detector thresholds apply to a RUN_DIR"),
    (["{tmp}", "rollout.top_k=3"], "key=value overrides go with a CONFIG.yaml"),
    (["{config}", "model.name_or_path=null", "data.train_path=null"], "model.name_or_path is not set; the pre-flight"),
])
def test_bad_input_exits_2_naming_it(tmp_path, tiny_model_dir, capsys, args, needle):
    config = _config(tmp_path, tiny_model_dir)
    assert main(["doctor", *[a.format(config=config, tmp=tmp_path) for a in args]]) == 2
    assert needle in capsys.readouterr().err


def test_a_run_directorys_config_naming_code_needs_trust(tmp_path, tiny_model_dir, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / ".steadyrl-run").write_text("{}")
    config = yaml.safe_load(_config(tmp_path, tiny_model_dir).read_text())
    config["rewards"] = [{"name": f"{tmp_path / 'theirs.py'}:score"}]
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    assert main(["doctor", str(run / "config.yaml")]) == 2
    assert "--trust-run-code" in capsys.readouterr().err


def test_two_causes_are_ranked_by_their_share_and_the_shares_add_up(tmp_path, tiny_model_dir):
    # top_k 10 of the 13 tokens: a truncation gap that a bfloat16 boundary shift cannot swamp
    result = _first(_config(tmp_path, tiny_model_dir, dtype="bfloat16", top_k=10), tolerance=1e-5)
    names = [c.name for c in result.causes]
    assert names[:2] == ["sampling", "precision"], [(c.name, c.gap) for c in result.causes]
    assert result.causes[0].share > result.causes[1].share > 0
    assert sum(c.share for c in result.causes) == pytest.approx(1.0)
    # two factors: the two-sided estimate is their Shapley split of the whole gap
    assert sum(c.gap for c in result.causes[:2]) == pytest.approx(result.baseline, rel=0.05)


def test_a_reward_failing_on_every_sample_is_said_first_and_exits_1(tmp_path, tiny_model_dir, capsys):
    """Issue 33: the pre-flight called a config healthy whose TRL-style reward raised on every sample."""
    (tmp_path / "trl.py").write_text("def first_content(prompts, completions, **kwargs):\n"
                                     "    return [float(c[0]['content'] == 'x') for c in completions]\n")
    config = _config(tmp_path, tiny_model_dir)
    assert main(["doctor", str(config), f"rewards=[{{name: {tmp_path / 'trl.py'}:first_content}}]"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("doctor: reward 'first_content' failed on every one of the 8 sampled completions: "
                          "TypeError: string indices must be integers"), out
