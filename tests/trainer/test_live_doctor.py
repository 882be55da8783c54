"""The doctor inside ``steadyrl train``: a detector that fires prints one line and is counted in
``health/doctor_findings``; the run goes on unless ``trainer.halt_on`` names the detector, in which
case it stops with its state saved (exit 1); ``report.md`` is written at the end; unknown names exit 2.

The tiny model scores 0 on every reversal, so every group has zero reward variance: the
``zero_variance`` detector fires as soon as it has ``min_steps`` steps (2 here)."""

from __future__ import annotations

import pytest
import torch

from steadyrl.cli import main
from steadyrl.tracking import read_metrics

torch.set_num_threads(1)

FAST = {"max_steps": 4, "doctor_every": 2,  # truncation off: only zero_variance can fire
        "doctor_thresholds": {"min_steps": 2, "truncation_max": 1, "truncation_rise": 1}}


def test_a_firing_detector_prints_one_line_is_counted_and_does_not_halt(write_config, tmp_path, capsys):
    out = tmp_path / "run"
    config = write_config(trainer=FAST)
    assert main(["train", str(config), "--output-dir", str(out)]) == 0
    text = capsys.readouterr().out
    lines = [line for line in text.splitlines() if line.startswith("doctor: step")]
    assert len(lines) == 1 and "`zero_variance`" in lines[0], text  # fired at step 2, not again at 4
    counts = {r["step"]: r["health/doctor_findings"] for r in read_metrics(out) if "health/doctor_findings" in r}
    assert counts == {1: 0.0, 2: 1.0, 3: 1.0, 4: 1.0}
    report = (out / "report.md").read_text()
    assert "Most groups carry no signal (`zero_variance`" in report
    assert f"doctor: {out / 'report.md'}: " in text


def test_halt_on_stops_the_run_with_its_state_saved_and_resume_trains_on(write_config, tmp_path, capsys):
    out = tmp_path / "run"
    config = write_config(trainer={**FAST, "halt_on": ["zero_variance"]})
    assert main(["train", str(config), "--output-dir", str(out)]) == 1
    err = capsys.readouterr().err
    assert "training stopped: doctor: `zero_variance`" in err and "fired at step 2" in err
    assert (out / "checkpoints" / "step_000002").is_dir(), sorted(p.name for p in (out / "checkpoints").iterdir())
    assert max(r["step"] for r in read_metrics(out)) == 2
    assert (out / "report.md").is_file()
    # the detector already fired: --resume does not halt on it again
    assert main(["train", "--output-dir", str(out), "--resume"]) == 0
    assert max(r["step"] for r in read_metrics(out)) == 4


def test_doctor_off_logs_no_count_and_prints_nothing(write_config, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", str(write_config(trainer={**FAST, "doctor_every": 0})), "--output-dir", str(out)]) == 0
    assert "doctor: step" not in capsys.readouterr().out
    assert all("health/doctor_findings" not in r for r in read_metrics(out))


@pytest.mark.parametrize("setting, needle", [
    ("trainer.halt_on=[entropy_colapse]", "trainer.halt_on: ['entropy_colapse']: 'entropy_colapse' is not a "
                                          "detector; valid names: zero_variance, "),
    ("trainer.doctor_thresholds={min_step: 2}", "trainer.doctor_thresholds: {'min_step': 2.0}: 'min_step' is not "
                                                "a threshold; valid names: min_steps, "),
    ("trainer.doctor_every=0|trainer.halt_on=[mismatch]", "trainer.halt_on: ['mismatch'] needs the detectors to "
                                                           "run: trainer.doctor_every = 0 turns them off"),
    ("trainer.doctor_thresholds={window_frac: 0.9}", "trainer.doctor_thresholds: entry window_frac='0.9': the value must be in (0, 0.5]"),
])
def test_an_unknown_detector_or_threshold_exits_2_naming_key_value_and_valid_names(write_config, tmp_path,
                                                                                   capsys, setting, needle):
    assert main(["train", str(write_config()), *setting.split("|"), "--output-dir", str(tmp_path / "run")]) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
