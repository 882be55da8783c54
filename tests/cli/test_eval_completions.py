"""``steadyrl eval --completions FILE``: the held-out prompts' greedy completions, to read what the
policy answers (eval printed only the numbers). The model's text goes into the file JSON-escaped,
never onto the console."""

from __future__ import annotations

import json

from steadyrl import cli


def test_eval_writes_each_held_out_greedy_completion_with_its_reward(tiny_run, tmp_path, capsys):
    out = tmp_path / "completions.jsonl"
    assert cli.main(["eval", str(tiny_run.config), "--model", str(tiny_run.model), "--completions", str(out)]) == 0
    printed = capsys.readouterr().out
    summary = json.loads(printed[printed.index("{"):])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    held_out = [json.loads(line)["prompt"] for line in tiny_run.eval.read_text().splitlines()]
    assert len(rows) == len(held_out) == summary["num_prompts"] and summary["completions"] == str(out)
    assert all(set(r) == {"prompt", "completion", "reward", "correct"} for r in rows)
    assert all(h in r["prompt"] for h, r in zip(held_out, rows))
    judged = [r["correct"] for r in rows if r["correct"] is not None]
    assert sum(judged) / len(judged) == summary["accuracy"]  # the file is what the accuracy counted


def test_eval_refuses_a_completions_file_in_a_missing_folder_before_loading(tiny_run, tmp_path, capsys):
    code = cli.main(["eval", str(tiny_run.config), "--model", str(tiny_run.model),
                     "--completions", str(tmp_path / "nowhere" / "c.jsonl")])
    assert code == 2 and "--completions" in capsys.readouterr().err
