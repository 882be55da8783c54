"""``steadyrl doctor RUN_DIR``: each injected problem is named first, a healthy run is healthy in one
line, thresholds are configurable, bad input exits 2, and the run directory is only ever read."""

from __future__ import annotations

import copy
import json

import pytest
from support_doctor import EXTRA_INJECTIONS, INJECTIONS, healthy_rows, healthy_samples, write_run

from steadyrl.cli import main
from steadyrl.doctor import DETECTORS, Thresholds, diagnose, load_run


def _injected(tmp_path, name, fn, seed=0):
    rows, samples = healthy_rows(seed), healthy_samples(seed)
    fn(rows, samples)
    return write_run(tmp_path / f"{name}-{seed}", rows, samples)


def test_every_detector_has_an_injection_that_tests_it():
    assert set(INJECTIONS) == set(DETECTORS)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_healthy_run_has_no_finding(tmp_path, seed):
    run = load_run(write_run(tmp_path / "ok", healthy_rows(seed), healthy_samples(seed)))
    assert diagnose(run) == []


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", sorted(INJECTIONS) + sorted(EXTRA_INJECTIONS))
def test_each_injected_problem_is_named_first(tmp_path, name, seed):
    detector, fn = EXTRA_INJECTIONS.get(name, (name, INJECTIONS.get(name)))
    findings = diagnose(load_run(_injected(tmp_path, name, fn, seed)))
    assert findings and findings[0].detector == detector, [(f.detector, f.severity) for f in findings]
    first = findings[0]
    assert first.severity >= 1 and first.evidence and first.advice
    assert 1 <= first.steps[0] <= first.steps[1] <= 40


def test_the_report_names_steps_evidence_change_and_example_samples(tmp_path, capsys):
    run_dir = _injected(tmp_path, "entropy_collapse", INJECTIONS["entropy_collapse"])
    assert main(["doctor", str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"# steadyrl doctor: {run_dir}")
    assert "1. Entropy collapsed (`entropy_collapse`, steps 1-40)" in out
    assert "`actor/entropy` 0.429 (mean of steps 1-10) -> 0.0101 (steps 31-40)" in out
    assert "entropy_collapse_ratio 0.3" in out
    assert "**Change:**" in out and "`optim.lr` (now 1e-06)" in out
    assert "Samples from steps 31-40:" in out  # the late window, where the collapse shows
    for label in ("- best (step", "- worst (step", "- longest (step"):
        assert label in out


def test_a_healthy_run_says_so_in_one_line_and_exits_0(tmp_path, capsys):
    run_dir = write_run(tmp_path / "ok", healthy_rows(), healthy_samples())
    assert main(["doctor", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(f"healthy: {run_dir}: no problem found over steps 1-40")


def test_a_threshold_set_on_the_command_line_changes_the_verdict(tmp_path, capsys):
    run_dir = write_run(tmp_path / "ok", healthy_rows(), healthy_samples())
    # the healthy entropy falls from ~0.8 to ~0.66: a collapse only for a user who asks for 0.95
    assert main(["doctor", str(run_dir), "--set", "entropy_collapse_ratio=0.95"]) == 1
    out = capsys.readouterr().out
    assert "Entropy collapsed" in out and "thresholds changed: entropy_collapse_ratio=0.95" in out
    assert diagnose(load_run(run_dir), Thresholds().with_overrides(["entropy_collapse_ratio=0.95"]))


def test_the_report_goes_to_output_and_nothing_is_written_into_the_run(tmp_path, capsys):
    run_dir = _injected(tmp_path, "mismatch", INJECTIONS["mismatch"])
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    report = tmp_path / "report.md"
    assert main(["doctor", str(run_dir), "--output", str(report)]) == 1
    assert "Training-inference mismatch growing" in report.read_text()
    assert capsys.readouterr().out.startswith(f"{report}: 1 problem(s), first: Training-inference mismatch")
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before


def test_samples_are_optional(tmp_path, capsys):
    rows = healthy_rows()
    INJECTIONS["clip_drift"](rows, [])
    assert main(["doctor", str(write_run(tmp_path / "r", rows))]) == 1
    assert "Clip fraction drifting up" in capsys.readouterr().out


def test_a_run_too_short_for_trends_is_not_called_sick(tmp_path):
    rows = healthy_rows(steps=3)
    INJECTIONS["entropy_collapse"](rows, [])
    assert diagnose(load_run(write_run(tmp_path / "short", rows))) == []


@pytest.mark.parametrize("make,needle", [
    (lambda d: d, "it is not a steadyrl run: there is no metrics.jsonl"),
    (lambda d: d / "missing", "does not exist"),
    (lambda d: (d / "file.txt").write_text("x") and d / "file.txt", "is not a directory"),
    (lambda d: write_run(d / "eval-only", [{"step": 0, "eval/accuracy": 0.3}]), "holds no training step"),
    (lambda d: (d / ".steadyrl-run").write_text("{}") and d, "holds a steadyrl marker but there is no metrics.jsonl"),
])
def test_a_directory_that_is_not_a_run_exits_2_naming_it_and_what_was_expected(tmp_path, capsys, make, needle):
    target = make(tmp_path)
    assert main(["doctor", str(target)]) == 2
    err = capsys.readouterr().err
    assert f"RUN_DIR {target}" in err and needle in err


@pytest.mark.parametrize("setting,needle", [
    ("nope=1", "name one of min_steps"),
    ("entropy_collapse_ratio=abc", "finite number >= 0"),
    ("entropy_collapse_ratio=-1", "finite number >= 0"),
    ("window_frac=0.9", "(0, 0.5]"),
    ("entropy_collapse_ratio", "give name=value"),
])
def test_a_bad_threshold_exits_2_naming_it(tmp_path, capsys, setting, needle):
    run_dir = write_run(tmp_path / "ok", healthy_rows())
    assert main(["doctor", str(run_dir), "--set", setting]) == 2
    assert needle in capsys.readouterr().err


def test_null_values_and_a_cut_last_line_are_read_like_the_plotter_reads_them(tmp_path):
    rows = healthy_rows()
    rows[5]["actor/entropy"] = None  # a non-finite value is logged as null
    run_dir = write_run(tmp_path / "r", rows)
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 41, "actor/entropy": 0.1})[:20])  # a crash mid-write
    run = load_run(run_dir)
    assert run.steps[-1] == 40 and len(run.series("actor/entropy")) == 39
    assert diagnose(run) == []


def test_every_threshold_is_documented_with_its_default(tmp_path):
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "stability.md").read_text(encoding="utf-8")
    for name, (default, _) in Thresholds.help().items():
        assert f"| `{name}` | {default:g} |" in page, name


def test_the_injections_leave_the_healthy_template_untouched():
    rows = healthy_rows()
    again = copy.deepcopy(rows)
    INJECTIONS["grad_spikes"](again, [])
    assert rows != again and healthy_rows() == rows


def test_the_doctor_command_imports_no_torch(tmp_path):
    import subprocess
    import sys

    run_dir = write_run(tmp_path / "ok", healthy_rows(), healthy_samples())
    script = ("import sys, contextlib, io\nfrom steadyrl.cli import main\n"
              "with contextlib.redirect_stdout(io.StringIO()):\n"
              f"    assert main(['doctor', {str(run_dir)!r}]) == 0\n"
              "print([m for m in ('torch', 'transformers') if m in sys.modules])\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_a_mismatch_finding_quotes_the_kl_and_what_the_correction_cut_when_the_run_logs_them(tmp_path):
    rows, samples = healthy_rows(0), healthy_samples(0)
    INJECTIONS["mismatch"](rows, samples)
    for row in rows:
        row["mismatch/k3"] = 1e-4 * row["step"]
        row["mismatch/masked_token_frac"] = 0.001 * row["step"]
    finding = next(f for f in diagnose(load_run(write_run(tmp_path / "run", rows, samples)))
                   if f.detector == "mismatch")
    text = "\n".join(finding.evidence)
    assert "`mismatch/k3`" in text and "`mismatch/masked_token_frac`" in text
    assert "steadyrl doctor CONFIG" in finding.advice and "rollout.correction.mode" in finding.advice


def test_a_run_that_solved_its_prompts_is_healthy_though_its_entropy_fell_and_its_groups_are_all_solved(tmp_path):
    rows, samples = healthy_rows(0), healthy_samples(0)
    for row in rows[1:]:  # what `make demo` does: reward to ~0.93, entropy to a sixth, groups all solved
        s = row["step"]
        row["reward/mean"] = min(0.3 + 0.03 * s, 0.93)
        row["actor/entropy"] = 0.3 * (1 - s / 48)
        row["batch/zero_std_group_frac"] = min(0.2 + 0.03 * s, 0.8)
    assert diagnose(load_run(write_run(tmp_path / "solved", rows, samples))) == []
    unsolved = [dict(r, **{"reward/mean": 0.5}) if "reward/mean" in r else r for r in rows]
    found = {f.detector for f in diagnose(load_run(write_run(tmp_path / "stuck", unsolved, samples)))}
    assert {"entropy_collapse", "zero_variance"} <= found  # the same run that did not solve them: problems
    loose = Thresholds(solved_frac=1.5)
    found = {f.detector for f in diagnose(load_run(write_run(tmp_path / "solved2", rows, samples)), loose)}
    assert {"entropy_collapse", "zero_variance"} <= found


def test_a_jump_between_small_gradient_norms_is_no_spike(tmp_path):
    rows, samples = healthy_rows(0), healthy_samples(0)
    for row in rows[1:]:  # a converged run: tiny norms, then one batch with signal (the tool demo's step 46)
        row["actor/grad_norm"] = 0.15
    rows[30]["actor/grad_norm"] = 0.93
    assert "grad_spikes" not in {f.detector for f in diagnose(load_run(write_run(tmp_path / "r", rows, samples)))}
    rows[30]["actor/grad_norm"] = 3.0
    assert "grad_spikes" in {f.detector for f in diagnose(load_run(write_run(tmp_path / "r2", rows, samples)))}
