"""The doctor sees a frozen policy: a run whose steps change almost no weight (updates lost to
bfloat16 rounding) is named, with model.dtype / model.bf16_update and the fix; a float32-like run,
and a run that logs no such metric, are not."""

from support_doctor import healthy_rows, write_run

from steadyrl.doctor import Thresholds, diagnose, load_run

CONFIG = "optim:\n  lr: 1.0e-06\nmodel:\n  dtype: bfloat16\n  bf16_update: plain\n"


def _run(tmp_path, frac):
    rows = healthy_rows()
    for r in rows:
        if r["step"] >= 1:
            r["actor/params_changed_frac"] = frac
            r["actor/update_ratio"] = 6e-6 if frac < 0.5 else 5e-5
    return load_run(write_run(tmp_path / "run", rows, config=CONFIG))


def test_a_frozen_policy_is_named_with_the_setting_and_the_fix(tmp_path):
    findings = diagnose(_run(tmp_path, 0.012))
    assert findings and findings[0].detector == "lost_updates"
    text = " ".join(findings[0].evidence) + findings[0].advice
    assert "0.012" in text and "model.dtype` (now bfloat16)" in text and "model.bf16_update` (now plain)" in text
    assert "model.dtype=auto" in findings[0].advice and "actor/update_ratio" in text


def test_a_run_whose_steps_move_the_weights_is_not_frozen(tmp_path):
    assert not [f for f in diagnose(_run(tmp_path, 0.93)) if f.detector == "lost_updates"]


def test_a_run_without_the_metric_is_not_judged(tmp_path):
    run = load_run(write_run(tmp_path / "run", healthy_rows()))
    assert not [f for f in diagnose(run, Thresholds()) if f.detector == "lost_updates"]


def test_steps_without_a_gradient_are_no_evidence(tmp_path):
    """All rewards equal -> advantages 0 -> gradient 0 -> nothing moves: zero_variance's problem, not this one."""
    rows = healthy_rows()
    for r in rows:
        if r["step"] >= 1:
            r["actor/params_changed_frac"], r["actor/grad_norm"] = 0.0, 0.0
    run = load_run(write_run(tmp_path / "run", rows, config=CONFIG))
    assert not [f for f in diagnose(run) if f.detector == "lost_updates"]

