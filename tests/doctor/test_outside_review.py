"""An outside review of the "never mislead" doctor (b-doctor): hostile and odd run files must not crash
it, and what it prints (live, withdrawn, final) must not contradict itself or blame the wrong cause."""

from __future__ import annotations

import json
import random

from support_doctor import INJECTIONS, healthy_rows, replay_live, write_run

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
    odd = ("trainer: [1]\n", "trainer: 5\n", "rewards: 5\n", "trainer:\n  doctor_thresholds: 3\n")
    for i, config in enumerate(odd):
        run_dir = write_run(tmp_path / f"run{i}", healthy_rows(), config=config)
        path, findings, verdict = write_report(run_dir)
        assert verdict == "healthy" and not findings and path.read_text().startswith("healthy:")


# --- the doctor CLI and report.md agree ---------------------------------------------------------


def test_steadyrl_doctor_judges_with_the_runs_own_thresholds_as_report_md_does(tmp_path, capsys):
    """The live line sends the user to ``steadyrl doctor RUN_DIR``; it must not contradict report.md."""
    rows = healthy_rows()
    INJECTIONS["entropy_collapse"](rows, [])  # 0.8 -> ~0.02: a collapse at the default ratio 0.3
    config = "optim:\n  lr: 1.0e-06\ntrainer:\n  doctor_thresholds:\n    entropy_collapse_ratio: 0.01\n"
    run_dir = write_run(tmp_path / "run", rows, config=config)
    assert write_report(run_dir)[2] == "healthy"
    assert doctor_cli(str(run_dir)) == 0
    out = capsys.readouterr().out
    assert out.startswith("healthy:") and "entropy_collapse_ratio=0.01" in out
    assert doctor_cli(str(run_dir), settings=["entropy_collapse_ratio=0.3"]) == 1  # --set still wins


# --- live lines against the final report --------------------------------------------------------


def test_a_live_finding_whose_claim_the_final_report_changes_is_revised_at_the_end(tmp_path, capsys):
    """Rising for 20 steps (printed mid-run: "Truncation rate rising"), then falling: the final report
    keeps the detector with another claim; the end must say the live claim does not hold."""
    rows = healthy_rows()
    for r in rows[1:]:
        s = r["step"]
        r["response/truncated_frac"] = 0.05 + 0.03 * s if s <= 20 else 0.65 - 0.03 * (s - 20)
    write_run(tmp_path, rows)
    replay_live(tmp_path, rows)
    out = capsys.readouterr().out
    assert "so far: Truncation rate rising" in out
    final = load_run(tmp_path)
    (f,) = [f for f in diagnose(final) if f.detector == "truncation"]
    assert f.title != "Truncation rate rising"
    assert (f"doctor: revised: Truncation rate rising (`truncation`, printed at step 10) does not hold over the "
            f"whole run: the final report says {f.title}") in out


def test_more_spikes_at_the_end_than_mid_run_is_the_same_claim_not_a_revision(tmp_path, capsys):
    rows = healthy_rows()
    for s in (12, 25, 33):
        rows[s]["actor/grad_norm"] = 30.0
    write_run(tmp_path, rows)
    replay_live(tmp_path, rows, every=20)
    out = capsys.readouterr().out
    assert "so far: Gradient-norm spikes (1)" in out and "first: Gradient-norm spikes (3)" in out
    assert "revised" not in out and "withdrawn" not in out


# --- held-out accuracy evaluated every step -----------------------------------------------------


def test_a_rising_held_out_accuracy_evaluated_every_step_is_not_called_falling(tmp_path):
    """eval every step on 64 prompts, accuracy rising 0.3 -> 0.7: the best of 40 noisy evaluations
    was compared with the last one, and 'held-out accuracy falls' fired in 26 of 40 seeds."""
    fired = 0
    for seed in range(10):
        rng = random.Random(seed)
        rows = healthy_rows(seed=seed)
        for r in rows:
            p = 0.3 + 0.01 * r["step"]
            r["eval/accuracy"] = sum(rng.random() < p for _ in range(64)) / 64
        run = load_run(write_run(tmp_path / str(seed), rows))
        fired += any(f.detector == "reward_vs_heldout" for f in diagnose(run))
    assert fired == 0


def test_a_held_out_accuracy_that_falls_evaluated_every_step_is_still_named(tmp_path):
    rng = random.Random(0)
    rows = healthy_rows()
    for r in rows:
        p = 0.6 - 0.008 * max(0, r["step"] - 10)  # 0.6 until step 10, then down to 0.36
        r["eval/accuracy"] = sum(rng.random() < p for _ in range(64)) / 64
    (f,) = [f for f in diagnose(load_run(write_run(tmp_path / "run", rows))) if f.detector == "reward_vs_heldout"]
    assert "mean" in f.evidence[1]


# --- lost updates: the step's own learning rate -------------------------------------------------

SR = "optim:\n  lr: 1.0e-06\n  warmup_steps: 100\nmodel:\n  dtype: bfloat16\n  bf16_update: stochastic_rounding\n"


def test_stochastic_rounding_during_warm_up_is_judged_against_the_steps_learning_rate(tmp_path):
    """20 steps into a 100-step warm-up the step's lr is 1e-8..2e-7: a weight moving 0.3 lr a step moves
    as AdamW asks, yet against optim.lr (the peak) it read as a frozen policy."""
    rows = healthy_rows(steps=20)
    for r in rows[1:]:
        lr = 1e-6 * r["step"] / 100
        r["actor/lr"], r["actor/update_rms"], r["actor/params_changed_frac"] = lr, 0.3 * lr, 0.002
    assert not [f for f in diagnose(load_run(write_run(tmp_path / "run", rows, config=SR)))
                if f.detector == "lost_updates"]
    for r in rows[1:]:
        r["actor/update_rms"] = 1e-3 * r["actor/lr"]  # frozen: still named
    (f,) = [f for f in diagnose(load_run(write_run(tmp_path / "frozen", rows, config=SR)))
            if f.detector == "lost_updates"]
    assert "actor/lr" in f.evidence[0]


def test_a_learning_rate_of_zero_is_named_as_the_cause_not_the_precision(tmp_path):
    for update in ("plain", "kahan", "stochastic_rounding"):
        config = f"optim:\n  lr: 1.0e-06\nmodel:\n  dtype: bfloat16\n  bf16_update: {update}\n"
        rows = healthy_rows()
        for r in rows[1:]:
            r["actor/lr"], r["actor/update_rms"], r["actor/params_changed_frac"] = 0.0, 0.0, 0.0
        (f,) = [f for f in diagnose(load_run(write_run(tmp_path / update, rows, config=config)))
                if f.detector == "lost_updates"]
        assert "learning rate" in f.title.lower() and "precision" not in f.title.lower(), update
        assert "`actor/lr`" in f.evidence[0] and "bf16_update=" not in f.advice, update


# --- a resumed run: what fired before the resume -------------------------------------------------


def test_a_finding_from_before_a_resume_that_the_final_report_drops_is_withdrawn(tmp_path, capsys):
    """Halted at step 10 on entropy_collapse (the line printed, the docs say: resume with a lower lr);
    the entropy recovers over the resumed steps and the final report is healthy. The resumed process
    knew the detector had fired (it counts it) yet said nothing: the user's last word on it was the halt."""
    rows = healthy_rows()
    for r in rows[1:]:
        s = r["step"]
        r["actor/entropy"] = 0.8 - 0.07 * (s - 1) if s <= 10 else 0.6
        r["reward/mean"] = 0.4
    write_run(tmp_path, rows[:11])
    first = LiveDoctor(tmp_path, {}, every=10, halt_on=[], thresholds={})
    for row in rows[1:11]:
        first.check(row["step"], {k: v for k, v in row.items() if k != "step"})
    assert "so far: Entropy collapsed" in capsys.readouterr().out
    resumed = LiveDoctor(tmp_path, {}, every=10, halt_on=[], thresholds={}, upto_step=10)
    assert "entropy_collapse" in resumed.fired
    write_run(tmp_path, rows)
    for row in rows[11:]:
        resumed.check(row["step"], {k: v for k, v in row.items() if k != "step"})
    resumed.finish()
    out = capsys.readouterr().out
    assert out.rstrip().endswith("report.md: healthy")
    assert ("doctor: withdrawn: Entropy collapsed (`entropy_collapse`, found by step 10, before the resume) does "
            "not hold over the whole run") in out


# --- doctor --output ----------------------------------------------------------------------------


def test_doctor_output_into_a_directory_or_a_missing_folder_is_bad_input_not_a_traceback(tmp_path, capsys):
    from steadyrl.cli import main

    run_dir = write_run(tmp_path / "run", healthy_rows())
    for output in (tmp_path, tmp_path / "nowhere" / "report.md"):
        assert main(["doctor", str(run_dir), "--output", str(output)]) == 2
        assert "--output" in capsys.readouterr().err


def test_doctor_output_does_not_replace_the_runs_own_record(tmp_path, capsys):
    from steadyrl.cli import main

    run_dir = write_run(tmp_path / "run", healthy_rows())
    metrics = (run_dir / "metrics.jsonl").read_text()
    assert main(["doctor", str(run_dir), "--output", str(run_dir / "metrics.jsonl")]) == 2
    assert "run directory's own metrics.jsonl" in capsys.readouterr().err
    assert (run_dir / "metrics.jsonl").read_text() == metrics
    assert main(["doctor", str(run_dir), "--output", str(run_dir / "report.md")]) == 0  # its triage: on purpose


# --- dominance: the weight of a user function's reward -----------------------------------------


def test_a_user_functions_weight_is_read_under_the_name_it_is_logged_by(tmp_path):
    """'path/file.py:fmt' is logged as reward/fmt (its function's name): its weight 0.05 was looked up as
    'path/file.py:fmt' only, taken as 1, and fmt read as carrying 0.91 of the weighted spread (0.33 in truth)."""
    config = ("optim:\n  lr: 1.0e-06\nrewards:\n  - name: my/rewards.py:fmt\n    weight: 0.05\n"
              "  - name: math\n    weight: 1.0\n")
    rows = healthy_rows()
    for r in rows[1:]:
        r.pop("reward/correct/mean"), r.pop("reward/format/mean")
        r["reward/fmt/mean"] = float(r["step"] % 2)  # spread 0.5, weight 0.05
        r["reward/math/mean"] = 0.4 + 0.1 * (r["step"] % 2)  # spread 0.05, weight 1
    for r in rows[1:]:
        r.pop("reward/domain/math/count"), r.pop("reward/domain/code/count")
    run = load_run(write_run(tmp_path / "run", rows, config=config))
    found = [f for f in diagnose(run) if f.detector == "dominance"]
    assert not found, found[0].evidence


# --- a run that solved every prompt -------------------------------------------------------------


def _perfect(rows, final: float):
    import math

    for r in rows[1:]:
        s = r["step"]
        done = s > 25
        r["actor/entropy"] = 0.8 * math.exp(-s / 8)
        r["reward/mean"] = r["reward/correct/mean"] = final if done else 0.3 + 0.025 * s
        r["reward/max"], r["reward/min"] = (final, final) if done else (1.0, 0.0)
        r["batch/zero_std_group_frac"] = 1.0 if done else 0.3
    return rows


def test_a_run_that_scores_every_late_prompt_the_top_reward_is_solved_not_collapsed(tmp_path):
    """Every reward 1 from step 26 (the top it ever reached, having started at 0): the late max equalled
    the late min, the position in the range read NaN, and a perfect run got 'Entropy collapsed' and
    'Most groups carry no signal' (a run at 0.97 was quiet)."""
    found = {f.detector for f in diagnose(load_run(write_run(tmp_path / "run", _perfect(healthy_rows(), 1.0))))}
    assert not found & {"entropy_collapse", "zero_variance"}


def test_a_run_whose_every_late_reward_is_the_bottom_is_still_named(tmp_path):
    found = {f.detector for f in diagnose(load_run(write_run(tmp_path / "run", _perfect(healthy_rows(), 0.0))))}
    assert {"entropy_collapse", "zero_variance"} <= found


# --- distillation: a student whose entropy rises to its teacher's ------------------------------

PURE = "optim:\n  lr: 1.0e-06\nteacher:\n  name_or_path: broad-teacher\n  task_rewards: false\n"


def _rising_student(tmp_path, kl_end: float, config: str = PURE):
    rows = healthy_rows()
    for r in rows[1:]:
        s = r["step"]
        r["actor/entropy"] = 0.3 + 0.6 * (s - 1) / 39  # 0.3 -> 0.9: the teacher is broader than the student
        r["distill/reverse_kl"] = kl_end ** ((s - 1) / 39)  # 1 -> kl_end, geometric
    return {f.detector for f in diagnose(load_run(write_run(tmp_path / f"run{kl_end}", rows, config=config)))}


def test_a_student_whose_entropy_rises_as_it_matches_its_teacher_has_not_exploded(tmp_path):
    """The reverse KL to the teacher fell 1 -> 0.01 (0.95 of its gap closed, late vs early): the student's
    entropy is the teacher's, not noise."""
    assert "entropy_explosion" not in _rising_student(tmp_path, 0.01)
    assert "entropy_explosion" not in _rising_student(tmp_path, 0.01, PURE.replace("  task_rewards: false\n", ""))


def test_a_student_whose_entropy_rises_away_from_its_teacher_is_still_named(tmp_path):
    assert "entropy_explosion" in _rising_student(tmp_path, 0.9)


# --- a domain name from the data, on the console and in the shares -----------------------------


def _domains(rows, names_counts):
    for r in rows[1:]:
        r.pop("reward/domain/math/count"), r.pop("reward/domain/code/count")
        for name, count in names_counts.items():
            r[f"reward/domain/{name}/count"] = count
    return rows


def test_a_live_line_shows_a_domain_names_control_characters_as_escapes(tmp_path, capsys):
    """A domain is a value of the dataset's domain column: the report escapes it, the live line printed it raw."""
    rows = _domains(healthy_rows(), {"m\x1b]0;owned\x07": 120, "code": 8})
    doctor = LiveDoctor(tmp_path, {}, every=10, halt_on=[], thresholds={})
    for row in rows[1:11]:
        doctor.check(row["step"], {k: v for k, v in row.items() if k != "step"})
    out = capsys.readouterr().out
    assert "dominates" in out and "\x1b" not in out and "\x07" not in out and "\\x1b" in out
    import pytest

    from steadyrl.errors import DoctorHalted

    write_run(tmp_path, rows[:11])
    halting = LiveDoctor(tmp_path, {}, every=10, halt_on=["dominance"], thresholds={})
    for row in rows[1:11]:
        halting.check(row["step"], {k: v for k, v in row.items() if k != "step"})
    with pytest.raises(DoctorHalted) as halted:
        halting.halt_if_asked(10, lambda step: tmp_path / "checkpoints")
    assert "dominates" in str(halted.value) and "\x1b" not in str(halted.value)


def test_a_domain_name_with_a_slash_is_counted_whole(tmp_path):
    """reward/domain/a/b/count was read as domain 'a': two domains 'en/math' and 'en/code' were one."""
    rows = _domains(healthy_rows(), {"en/math": 30, "en/code": 30, "fr": 3})
    assert not [f for f in diagnose(load_run(write_run(tmp_path / "run", rows))) if f.detector == "dominance"]


# --- a run whose every value is NaN ---------------------------------------------------------------


def test_a_run_whose_every_value_is_nan_is_not_called_healthy(tmp_path, capsys):
    """Literal NaN (another writer's JSON) is read, then dropped by every series: 40 steps of nothing were
    'healthy: no problem found over steps 1-40'. A step with no finite training value is no training step."""
    rows = healthy_rows()
    text = "".join(json.dumps({k: (v if k == "step" else float("nan")) for k, v in r.items()}) + "\n" for r in rows)
    run_dir = write_run(tmp_path / "run", rows)
    (run_dir / "metrics.jsonl").write_text(text)
    from steadyrl.errors import DataError

    try:
        code = doctor_cli(str(run_dir))
    except DataError as exc:
        assert "no training step" in str(exc)
    else:
        assert code != 0 or not capsys.readouterr().out.startswith("healthy")
    half = "".join(json.dumps({k: (v if k == "step" or r["step"] <= 10 else float("nan")) for k, v in r.items()}) + "\n"
                   for r in rows)
    (run_dir / "metrics.jsonl").write_text(half)
    doctor_cli(str(run_dir))
    assert "steps 1-10" in capsys.readouterr().out  # the steps it could read, not 1-40


# --- halt_on names the new detector ---------------------------------------------------------------


def test_trainer_halt_on_accepts_judge_silent():
    """judge_silent joined the registry but not the config's torch-free list of names: halt_on=[judge_silent]
    (the detector a constant-0 judge reward most needs) was refused at load as an unknown detector."""
    from steadyrl.config import load_config

    config = load_config(None, ["trainer.halt_on=[judge_silent]"])
    assert config.trainer.halt_on == ["judge_silent"]
