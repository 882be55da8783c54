"""The doctor never misleads: a trend is named in the direction it goes, and a frozen policy is
judged by the quantity that moves under the run's own precision setting, with a fix worded from
that setting (issue "A TRL user's third week", items 1-2)."""

from support_doctor import healthy_rows, write_run

from steadyrl.doctor import diagnose, load_run


def _with(tmp_path, key, fn, config=None, rows=None):
    rows = rows or healthy_rows()
    for r in rows:
        if r["step"] >= 1:
            r[key] = fn(r["step"])
    return load_run(write_run(tmp_path / "run", rows, config=config))


def _finding(run, name):
    found = [f for f in diagnose(run) if f.detector == name]
    return found[0] if found else None


# --- item 1: truncation -------------------------------------------------------------------------


def test_a_falling_truncation_rate_is_not_called_rising_nor_advised_a_longer_limit(tmp_path):
    run = _with(tmp_path, "response/truncated_frac", lambda s: 0.75 - 0.016 * s)  # 0.72 -> 0.13, as reported
    f = _finding(run, "truncation")
    assert f is not None and "rising" not in f.title.lower() and "falling" in f.title.lower()
    assert f.severity == 1.0  # listed after every real problem
    assert f.advice.startswith("The policy is learning to end") and "let it train on" in f.advice


def test_a_rising_truncation_rate_is_still_called_rising(tmp_path):
    f = _finding(_with(tmp_path, "response/truncated_frac", lambda s: 0.01 + 0.006 * s), "truncation")
    assert f is not None and f.title == "Truncation rate rising" and "raise `rollout.max_new_tokens`" in f.advice


def test_a_flat_high_truncation_rate_is_called_high(tmp_path):
    f = _finding(_with(tmp_path, "response/truncated_frac", lambda s: 0.3), "truncation")
    assert f is not None and f.title == "Truncation rate high"


# --- item 2: lost updates per precision setting -------------------------------------------------

SR = "optim:\n  lr: 1.0e-06\nmodel:\n  dtype: bfloat16\n  bf16_update: stochastic_rounding\n"


def _sr_run(tmp_path, rms):
    rows = healthy_rows()
    for r in rows:
        if r["step"] >= 1:  # stochastic rounding at lr 1e-6: ~1% of the weights change per step
            r["actor/params_changed_frac"], r["actor/update_ratio"], r["actor/update_rms"] = 0.012, 6.2e-4, rms
    return load_run(write_run(tmp_path / "run", rows, config=SR))


def test_stochastic_rounding_that_moves_the_weights_is_not_a_frozen_policy(tmp_path):
    """The reported run: update ratio 6.2e-4 (7x float32's) with 1.2% of the weights changed per step."""
    assert _finding(_sr_run(tmp_path, 1.3e-5), "lost_updates") is None


def test_stochastic_rounding_that_does_not_move_is_named_with_its_own_setting(tmp_path):
    f = _finding(_sr_run(tmp_path, 1e-9), "lost_updates")
    assert f is not None and "actor/update_rms" in f.evidence[0] and "stochastic_rounding" in f.advice
    assert "plain" not in f.advice and "bfloat16 and" not in f.advice


def test_stochastic_rounding_without_the_motion_metric_is_not_judged_by_the_changed_share(tmp_path):
    run = _with(tmp_path, "actor/params_changed_frac", lambda s: 0.012, config=SR)
    assert _finding(run, "lost_updates") is None


def test_plain_at_lr_1e_4_names_the_weights_it_loses_as_the_startup_warning_does(tmp_path):
    from types import SimpleNamespace

    from steadyrl.precision import precision_warnings

    config = "optim:\n  lr: 1.0e-04\nmodel:\n  dtype: bfloat16\n  bf16_update: plain\n"
    f = _finding(_with(tmp_path, "actor/params_changed_frac", lambda s: 0.3, config=config), "lost_updates")
    assert f is not None and "above |w| = 0.051" in f.advice and "6.1e-5" not in f.advice
    (warning,) = precision_warnings(SimpleNamespace(dtype="bfloat16", bf16_update="plain"), SimpleNamespace(lr=1e-4))
    assert "above |w| = 0.051" in warning  # the run's start-up warning names the same weights


def test_the_fix_never_names_a_setting_the_run_does_not_use(tmp_path):
    float32 = "optim:\n  lr: 1.0e-06\nmodel:\n  dtype: auto\n"
    f = _finding(_with(tmp_path, "actor/params_changed_frac", lambda s: 0.1, config=float32), "lost_updates")
    assert f is not None and "bfloat16" not in f.advice and "bf16_update" not in f.advice
    assert "float32" in f.advice and f.title == "Few trained weights move per step"
    kahan = "optim:\n  lr: 1.0e-06\nmodel:\n  dtype: float16\n  bf16_update: kahan\n"
    f = _finding(_with(tmp_path, "actor/params_changed_frac", lambda s: 0.1, config=kahan), "lost_updates")
    assert f is not None and "(now float16)" in f.advice and "(now kahan)" in f.advice and "plain" not in f.advice


# --- item 5: distillation is judged by the signal that trains -----------------------------------

PURE = "optim:\n  lr: 1.0e-06\nteacher:\n  name_or_path: big-teacher\n  task_rewards: false\n"


def _collapsed_student(tmp_path, config):
    """The reported run: entropy 2.32 -> 0.12 while the reverse KL fell 1.37 -> 0.71; the student answers
    every prompt the same right way (task reward solved, every group all-equal)."""
    rows = healthy_rows()
    for r in rows:
        s = r["step"]
        if s >= 1:
            r["actor/entropy"] = 2.32 * (0.12 / 2.32) ** ((s - 1) / 39)
            r["distill/reverse_kl"] = 1.37 - (1.37 - 0.71) * (s - 1) / 39
            r["reward/mean"], r["reward/correct/mean"] = 0.97, 0.97
            r["batch/zero_std_group_frac"] = 1.0
            r["reward/format/mean"] = 0.5 + 0.01 * (s % 3)
    return load_run(write_run(tmp_path / "run", rows, config=config))


def test_a_pure_distillation_student_that_collapses_is_flagged(tmp_path):
    found = {f.detector for f in diagnose(_collapsed_student(tmp_path, PURE))}
    assert "entropy_collapse" in found  # its task reward looks solved, but the reverse KL is far from 0


def test_pure_distillation_is_not_judged_by_task_rewards_that_do_not_train(tmp_path):
    found = {f.detector for f in diagnose(_collapsed_student(tmp_path, PURE))}
    assert not found & {"zero_variance", "dominance", "length_hacking", "reward_vs_heldout"}


def test_without_a_teacher_the_same_metrics_read_as_a_solved_task(tmp_path):
    found = {f.detector for f in diagnose(_collapsed_student(tmp_path, "optim:\n  lr: 1.0e-06\n"))}
    assert "entropy_collapse" not in found  # solved prompts: convergence, as before


def test_a_student_that_closed_its_gap_to_the_teacher_is_converged_not_collapsed(tmp_path):
    run = _collapsed_student(tmp_path, PURE)
    for r in run.rows:
        if r["step"] >= 1:
            r["distill/reverse_kl"] = 1.37 * 0.02 ** ((r["step"] - 1) / 39)  # 1.37 -> 0.03
    assert "entropy_collapse" not in {f.detector for f in diagnose(run)}


def test_the_live_doctor_reads_the_distillation_signal_for_still_learning(tmp_path):
    from steadyrl.config.doctor_thresholds import Thresholds
    from steadyrl.doctor.live import still_learning

    run = _collapsed_student(tmp_path, PURE)  # task reward flat at 0.97, reverse KL still falling
    assert still_learning(run, Thresholds(reward_rise=0.01))
    run.config = {}
    assert not still_learning(run, Thresholds(reward_rise=0.01))


# --- item 4: too short to judge, a judge that never answered ------------------------------------


def test_a_run_of_three_steps_is_too_short_to_judge_not_healthy(tmp_path, capsys):
    from steadyrl.doctor import doctor_cli, write_report

    run_dir = write_run(tmp_path / "run", healthy_rows(steps=3))
    assert doctor_cli(str(run_dir)) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"too short to judge: {run_dir}: 3 training step(s)") and "healthy" not in out
    assert "min_steps = 6" in out
    path, findings, verdict = write_report(run_dir)
    assert not findings and verdict == "too short to judge (3 training step(s))"
    assert path.read_text().startswith("too short to judge")
    long_enough = write_run(tmp_path / "long", healthy_rows(steps=6))
    assert write_report(long_enough)[2] == "healthy"


def _silent_judge_run(tmp_path, share, steps=3):
    rows = healthy_rows(steps=steps)
    for r in rows:
        if r["step"] >= 1:
            r["reward/llm_judge/criterion/not_a_verdict_frac"] = share
            r["reward/llm_judge/mean"] = 0.0
    return load_run(write_run(tmp_path / "run", rows))


def test_a_judge_that_never_answered_is_named_even_on_a_short_run(tmp_path):
    from steadyrl.doctor.report import render

    run = _silent_judge_run(tmp_path, 1.0)
    (f,) = diagnose(run)
    assert f.detector == "judge_silent" and f.severity == 10.0
    assert "no verdict at all" in f.evidence[0] and "`reward/llm_judge/mean` is 0 at every step" in f.evidence[0]
    text = render(run, [f], 1, {}, 6)
    assert "Too short to judge the trends: 3 training step(s)" in text


def test_a_judge_that_mostly_answers_is_not_named(tmp_path):
    assert not [f for f in diagnose(_silent_judge_run(tmp_path, 0.1, steps=20)) if f.detector == "judge_silent"]


def test_the_live_doctor_says_too_short_at_the_end_of_a_short_run(tmp_path, capsys):
    from steadyrl.doctor.live import LiveDoctor

    run_dir = write_run(tmp_path / "run", healthy_rows(steps=2))
    LiveDoctor(run_dir, {}, every=10, halt_on=[], thresholds={}).finish()
    assert capsys.readouterr().out.strip().endswith("report.md: too short to judge (2 training step(s))")


def test_float16_stochastic_rounding_rounds_to_nearest_and_is_judged_so(tmp_path):
    config = "optim:\n  lr: 1.0e-06\nmodel:\n  dtype: float16\n  bf16_update: stochastic_rounding\n"
    f = _finding(_with(tmp_path, "actor/params_changed_frac", lambda s: 0.02, config=config), "lost_updates")
    assert f is not None and "rounding to nearest (stochastic rounding is for bfloat16 only)" in f.advice
    assert "above |w| = 0.0041" in f.advice and "plain AdamW" not in f.advice  # float16: lr * 2**12
