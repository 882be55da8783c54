"""An outside review of the "never mislead" doctor (b-doctor): hostile and odd run files must not crash
it, and what it prints (live, withdrawn, final) must not contradict itself or blame the wrong cause."""

from __future__ import annotations

import json
import random

from support_doctor import INJECTIONS, healthy_rows, write_run

from steadyrl.doctor import diagnose, doctor_cli, load_run, write_report
from steadyrl.doctor.live import LiveDoctor


def _lines(rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


# --- crashes on hostile files -------------------------------------------------------------------


def test_an_integer_too_large_for_a_float_is_not_a_crash(tmp_path, capsys):
    """JSON integers have no limit: ``float(10**400)`` raises OverflowError (a value, and a step)."""
    run_dir = write_run(tmp_path / "run", healthy_rows())
    huge = "9" * 400
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write(f'{{"step": 41, "actor/entropy": {huge}, "reward/mean": 0.5}}\n')
        f.write(f'{{"step": {huge}, "actor/entropy": 0.5}}\n')
    assert doctor_cli(str(run_dir)) == 0
    out = capsys.readouterr().out
    assert out.startswith("healthy:") and "steps 1-41" in out


def test_a_sample_reward_too_large_for_a_float_is_not_a_crash(tmp_path, capsys):
    from support_doctor import healthy_samples

    rows, samples = healthy_rows(), healthy_samples()
    INJECTIONS["length_hacking"](rows, samples)  # a finding: its example samples are quoted, lengths correlated
    huge = "9" * 400
    run_dir = write_run(tmp_path / "run", rows, samples)
    with open(run_dir / "samples.jsonl", "a") as f:
        f.write(f'{{"step": 40, "prompt": "p", "completion": "c", "reward": {huge}, "reward/correct": {huge}}}\n')
    assert doctor_cli(str(run_dir)) == 1
    assert "length_hacking" in capsys.readouterr().out


def test_a_hand_edited_config_with_odd_sections_still_gets_its_report(tmp_path):
    """train's last act (report.md) and plot's read config.yaml: a section of the wrong type is no crash."""
    for i, config in enumerate(("trainer: [1]\n", "trainer: 5\n", "rewards: 5\n", "trainer:\n  doctor_thresholds: 3\n")):
        run_dir = write_run(tmp_path / f"run{i}", healthy_rows(), config=config)
        path, findings, verdict = write_report(run_dir)
        assert verdict == "healthy" and not findings and path.read_text().startswith("healthy:")
