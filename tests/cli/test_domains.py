"""Several domains in one run, end to end: two training files mixed by weight (each with its own
columns and domain), a reward per domain that is never called on the other domain's rows,
per-domain metrics and normalisation, two held-out sets evaluated separately, exact resume of
the mixture; and the bad inputs of all that exit 2 before any model loads, naming the key."""

from __future__ import annotations

import json

import pytest
import transformers
import yaml

from steadyrl import cli

from .conftest import write_jsonl

RECORDER = '''"""Rewards that log what they receive, one JSON line per call."""
import json


def reverse(prompts, completions, answer, log, **columns):
    with open(log, "a") as f:
        f.write(json.dumps({"fn": "reverse", "domain": columns["domain"], "prompts": prompts}) + "\\n")
    return [float(c.strip() == a) for c, a in zip(completions, answer)]


def short(prompts, completions, log, **columns):
    with open(log, "a") as f:
        f.write(json.dumps({"fn": "short", "domain": columns["domain"], "prompts": prompts}) + "\\n")
    return [10.0 - len(c) for c in completions]
'''


@pytest.fixture(scope="module")
def domains_run(tiny_run, tmp_path_factory):
    root = tmp_path_factory.mktemp("domains")
    rows = [json.loads(line) for line in tiny_run.train.read_text().splitlines()]
    evals = [json.loads(line) for line in tiny_run.eval.read_text().splitlines()]
    write_jsonl(root / "rev.jsonl", rows[:8])
    write_jsonl(root / "fmt.jsonl", [{"question": "Z" + r["prompt"], "target": r["answer"]} for r in rows[8:]])
    write_jsonl(root / "rev_eval.jsonl", evals[:4])
    write_jsonl(root / "fmt_eval.jsonl", [{"question": "Z" + r["prompt"], "target": r["answer"]} for r in evals[4:]])
    (root / "rec.py").write_text(RECORDER)
    log = root / "calls.jsonl"
    config = yaml.safe_load(tiny_run.config.read_text())
    config["data"] = {
        "domain_key": "domain",
        "train_sources": [
            {"path": str(root / "rev.jsonl"), "weight": 3.0, "domain": "rev"},
            {"path": str(root / "fmt.jsonl"), "weight": 1.0, "domain": "fmt", "prompt_key": "question",
             "answer_key": "target"},
        ],
        "eval_sources": [
            {"path": str(root / "rev_eval.jsonl"), "domain": "rev"},
            {"path": str(root / "fmt_eval.jsonl"), "domain": "fmt", "prompt_key": "question", "answer_key": "target"},
        ],
    }
    config["rewards"] = [
        {"name": f"{root / 'rec.py'}:reverse", "domains": ["rev"], "options": {"log": str(log)}},
        {"name": f"{root / 'rec.py'}:short", "domains": ["fmt"], "weight": 0.5, "options": {"log": str(log)}},
    ]
    config["algorithm"] = {"reward_norm_by_domain": True, "reward_norm_mean": "batch", "reward_norm_std": "batch"}
    config["trainer"].update(max_steps=3, save_every=1)
    config["eval"] = {"num_samples": 0, "accuracy_reward": "reverse"}
    (root / "cfg.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return root


@pytest.fixture(scope="module")
def trained(domains_run, steadyrl_cli):
    out = domains_run / "run"
    proc = steadyrl_cli("train", str(domains_run / "cfg.yaml"), "--output-dir", str(out), "trainer.max_steps=2")
    assert proc.returncode == 0, proc.stderr
    return out


def _rows(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_each_reward_is_called_only_on_its_domains_rows(trained, domains_run):
    calls = [json.loads(line) for line in (domains_run / "calls.jsonl").read_text().splitlines()]
    assert {c["fn"] for c in calls} == {"reverse", "short"}
    for call in calls:
        want = "rev" if call["fn"] == "reverse" else "fmt"
        assert set(call["domain"]) == {want}, call
        assert all(p.startswith("Z") == (want == "fmt") for p in call["prompts"])


def test_metrics_per_domain_and_per_held_out_set(trained):
    rows = _rows(trained)
    for row in rows[1:]:
        assert 0.0 <= row["reward/domain/rev/valid_frac"] <= 1.0 and row["reward/unrouted"] == 0.0
        assert row["reward/domain/rev/count"] + row.get("reward/domain/fmt/count", 0) == 16  # 4 prompts x 4
        assert "data/source/rev/epoch" in row and "data/source/fmt/epoch" in row
    for row in (rows[0], rows[-1]):  # before and after training
        assert 0.0 <= row["eval/rev_eval/accuracy"] <= 1.0 and row["eval/rev_eval/num_prompts"] == 4
        assert row["eval/fmt_eval/reward_mean"] is not None
        assert row["eval/fmt_eval/accuracy"] is None  # not the accuracy reward's domain: nothing measured
        assert row["eval/accuracy"] == row["eval/rev_eval/accuracy"] and row["eval/num_prompts"] == 8


@pytest.mark.slow
def test_resume_continues_the_mixture_exactly(trained, domains_run, steadyrl_cli, tmp_path):
    whole = tmp_path / "whole"
    proc = steadyrl_cli("train", str(domains_run / "cfg.yaml"), "--output-dir", str(whole))
    assert proc.returncode == 0, proc.stderr
    proc = steadyrl_cli("train", str(domains_run / "cfg.yaml"), "--output-dir", str(trained), "--resume")
    assert proc.returncode == 0, proc.stderr
    resumed, straight = _rows(trained)[-1], _rows(whole)[-1]
    assert resumed["step"] == straight["step"] == 3
    for key in ("reward/domain/rev/count", "data/source/rev/epoch", "data/source/fmt/epoch", "epoch"):
        assert resumed.get(key) == straight.get(key), key


class ModelLoadAttempted(Exception):
    pass


def _sources(domains_run, **first):
    config = yaml.safe_load((domains_run / "cfg.yaml").read_text())
    sources = config["data"]["train_sources"]
    sources[0] = {**sources[0], **first}
    return sources




BAD = {
    "a weight that is not positive": (
        lambda r: {"data.train_sources": _sources(r, weight=0)}, ("data.train_sources[0].weight", "greater than 0")),
    "a source missing its prompt column": (
        lambda r: {"data.train_sources": _sources(r, prompt_key="question")}, ("data.train_sources[0]", "'question'")),
    "both train_path and train_sources": (
        lambda r: {"data.train_path": str(r / "rev.jsonl")}, ("data.train_path", "data.train_sources")),
    "a reward domain no row has": (
        lambda r: {"rewards": [{"name": f"{r / 'rec.py'}:reverse", "domains": ["rev", "cod"],
                                "options": {"log": "/dev/null"}},
                               {"name": f"{r / 'rec.py'}:short", "domains": ["fmt"], "options": {"log": "/dev/null"}}]},
        ("rewards[0].domains", "'cod'")),
    "a domain with no reward": (
        lambda r: {"rewards": [{"name": f"{r / 'rec.py'}:reverse", "domains": ["rev"], "options": {"log": "/dev/null"}}]},
        ("'fmt'", "no reward applies")),
    "reward domains without domain_key": (
        lambda r: {"data.domain_key": None, "data.train_sources": [{"path": str(r / "rev.jsonl")}],
                   "data.eval_sources": None}, ("rewards[0].domains", "data.domain_key")),
    "per-domain running normalisation": (
        lambda r: {"algorithm.reward_norm_mean": "running"}, ("reward_norm_by_domain", "running")),
}


def _write(domains_run, name, changes):
    config = yaml.safe_load((domains_run / "cfg.yaml").read_text())
    for key, value in changes.items():
        if "." in key:
            section, name_ = key.split(".", 1)
            config[section][name_] = value
        else:
            config[key] = value
    path = domains_run / f"bad_{name.replace(' ', '_')}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.mark.parametrize("name", list(BAD))
def test_bad_domain_input_exits_2_before_any_model_loads(name, domains_run, tmp_path, capsys, monkeypatch):
    make, words = BAD[name]
    path = _write(domains_run, name, make(domains_run))
    loads = []
    for cls in (transformers.AutoModelForCausalLM, transformers.AutoModel):
        def forbid(model, *args, **kwargs):
            loads.append(model)
            raise ModelLoadAttempted(str(model))
        monkeypatch.setattr(cls, "from_pretrained", forbid)
    code = cli.main(["train", str(path), "--output-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert "Traceback" not in err and code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("steadyrl: error: "), err
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert loads == []


def test_every_metric_of_a_domains_run_is_documented(trained):
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    patterns = [re.sub(r"<[a-z]+>", r"[^/]+", re.escape(m).replace(r"\<", "<").replace(r"\>", ">"))
                for m in re.findall(r"`([a-z_]+/[^`\s]+)`", text)]
    names = {k for row in _rows(trained) for k in row} - {"step", "epoch"}
    wanted = {n for n in names if n.startswith(("reward/domain/", "reward/unrouted", "data/source/", "eval/"))}
    assert len(wanted) > 10
    assert sorted(n for n in wanted if not any(re.fullmatch(p, n) for p in patterns)) == []


def test_resume_with_other_source_weights_exits_2(trained, domains_run, capsys):
    sources = _sources(domains_run, weight=5.0)
    path = _write(domains_run, "reweighted", {"data.train_sources": sources})
    code = cli.main(["train", str(path), "--output-dir", str(trained), "--resume", "trainer.max_steps=4"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert "data.train_sources" in err and "--resume" in err
