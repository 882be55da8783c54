"""Run triage on two whole scenarios, each with the side effects that come with it, and the report
files: ``steadyrl plot`` writes ``report.md`` beside ``dashboard.png``.

* a reward that pays for length: responses grow with the reward, and more of them hit the length
  limit (truncation rises too): the doctor names length hacking first;
* a learning rate that collapses entropy: entropy falls to almost nothing while PPO clips more and
  the gradient norm grows: the doctor names the entropy collapse first."""

from __future__ import annotations

import math

import pytest
from support_doctor import healthy_rows, healthy_samples, write_run

from steadyrl.cli import main
from steadyrl.doctor import diagnose, load_run


def _length_paying(rows, samples):
    for r in rows[1:]:
        s = r["step"]
        r["response/length_mean"] = 50 + 5 * s + 2 * math.sin(s)
        r["reward/mean"] = 0.2 + 0.015 * s + 0.01 * math.cos(s)  # paid per token: tracks the length
        r["response/truncated_frac"] = 0.01 + 0.0018 * s  # 0.01 -> 0.08: rising, under truncation_max
    for row in samples:
        row["completion"] = "word " * (10 + 2 * row["step"])


def _lr_too_high(rows, samples):
    for r in rows[1:]:
        s = r["step"]
        r["actor/entropy"] = 0.8 * math.exp(-s / 6) + 0.005
        r["actor/pg_clipfrac"] = 0.02 + 0.002 * s  # 0.02 -> 0.1: clips more as the policy jumps
        r["actor/grad_norm"] = 1.0 + 0.05 * s


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("scenario, detector", [(_length_paying, "length_hacking"),
                                                (_lr_too_high, "entropy_collapse")])
def test_the_scenarios_cause_is_named_first(tmp_path, seed, scenario, detector):
    rows, samples = healthy_rows(seed), healthy_samples(seed)
    scenario(rows, samples)
    findings = diagnose(load_run(write_run(tmp_path / "run", rows, samples)))
    assert findings and findings[0].detector == detector, [(f.detector, round(f.severity, 2)) for f in findings]


def test_plot_writes_the_report_beside_the_dashboard(tmp_path, capsys):
    rows, samples = healthy_rows(), healthy_samples()
    _length_paying(rows, samples)
    run = write_run(tmp_path / "run", rows, samples)
    assert main(["plot", str(run)]) == 0
    assert (run / "dashboard.png").is_file()
    assert "(`length_hacking`" in (run / "report.md").read_text()
    healthy = write_run(tmp_path / "ok", healthy_rows(), healthy_samples())
    assert main(["plot", str(healthy), "--out", str(tmp_path / "elsewhere" / "ok.png")]) == 0
    report = (tmp_path / "elsewhere" / "report.md").read_text()
    assert report.startswith("healthy: ") and report.count("\n") == 1
    assert not (healthy / "report.md").exists()  # beside the dashboard, wherever it goes
