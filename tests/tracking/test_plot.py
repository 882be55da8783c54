"""steadyrl plot: a real, non-blank PNG dashboard from metrics.jsonl, whatever was (not) logged."""

from __future__ import annotations

import json

import numpy as np
import pytest
from matplotlib.image import imread

from steadyrl.errors import ConfigError, DataError
from steadyrl.plot import PANELS, ema, load_run, main, plot_cli, plot_run, plot_runs


def assert_real_image(path, min_width=800, min_height=300):
    assert path.exists() and path.stat().st_size > 10_000
    img = imread(path)
    height, width = img.shape[:2]
    assert width >= min_width and height >= min_height
    rgb = img[..., :3]
    assert rgb.std() > 0.05  # not blank
    assert (rgb.mean(axis=-1) < 0.9).mean() > 0.03  # a fair share of ink, not a white page
    return img


def test_dashboard_of_a_realistic_run_with_nulls_and_a_crashed_last_line(synthetic_run):
    run = load_run(synthetic_run)
    assert len(run.get("reward/mean")[0]) == 60  # the cut-off 61st line is skipped
    assert run.skipped_steps().tolist() == [22.0, 42.0]
    assert len(run.get("kl/k3")[0]) == 60 - 3  # nulls at steps 17, 34, 51 are missing, not zeros
    out = plot_run(synthetic_run)
    assert out == synthetic_run / "dashboard.png"
    img = assert_real_image(out, min_width=1500)
    assert img.shape[1] > img.shape[0]  # a landscape grid


def test_a_run_with_one_step_still_plots(tmp_path, make_run):
    run_dir = make_run(tmp_path / "one", steps=1)
    assert_real_image(plot_run(run_dir, tmp_path / "one.png"))


def test_missing_metrics_leave_their_panels_out(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.1}) + "\n"
                                            + json.dumps({"step": 2, "reward/mean": 0.3}) + "\n")  # fmt: skip
    run = load_run(tmp_path)
    assert [p.title for p in PANELS if any(run.get(k) is not None for k in p.keys(run))] == ["Reward"]
    assert_real_image(plot_run(tmp_path, tmp_path / "only_reward.png"), min_width=400)


def test_several_runs_overlay_in_one_png(tmp_path, make_run):
    a = make_run(tmp_path / "baseline", steps=40, seed=1)
    b = make_run(tmp_path / "candidate", steps=50, seed=2, ppo=True, lift=0.6)
    assert_real_image(plot_runs([a, b], tmp_path / "cmp" / "a_vs_b.png"), min_width=1500)


def test_cli_main_writes_the_png_and_prints_its_path(tmp_path, capsys):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.2}\n{"step": 2, "reward/mean": 0.4}\n')
    out = tmp_path / "dash.png"
    assert main([str(tmp_path), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert out.stat().st_size > 0


def test_the_runs_metrics_file_may_be_given_for_its_directory(tmp_path, make_run):
    run_dir = make_run(tmp_path / "run", steps=5)
    assert plot_run(run_dir / "metrics.jsonl") == run_dir / "dashboard.png"
    assert_real_image(run_dir / "dashboard.png")


def test_a_missing_run_is_a_data_error_naming_the_file(tmp_path, capsys):
    with pytest.raises(DataError, match="metrics.jsonl does not exist") as err:
        plot_cli([str(tmp_path / "nope")])
    assert isinstance(err.value, ConfigError)  # exit status 2 from the steadyrl CLI
    assert main([str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_ema_is_debiased_and_leaves_short_series_alone():
    x = np.full(100, 3.0)
    assert np.allclose(ema(x, span=10), 3.0)  # no pull towards 0 at the start
    y = np.array([0.0, 10.0])
    assert np.array_equal(ema(y, span=1), y)
    noisy = np.random.default_rng(0).normal(size=500)
    assert ema(noisy, span=10).std() < noisy.std() / 2
