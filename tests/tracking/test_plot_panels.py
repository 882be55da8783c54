"""steadyrl plot must not mislead: which panels and series a run gets, on which axis, in which
colour and style, checked on the data and the figure's artists (not on pixels)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from steadyrl.plot import PANELS, load_run
from steadyrl.plot.data import KL_TERM
from steadyrl.plot.draw import figure
from steadyrl.plot.panels import reward_spread, select_panels
from steadyrl.plot.series import legend_entries, panel_series


def write_rows(run_dir, rows):
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


def panel(title):
    return next(p for p in PANELS if p.title == title)


def axes_of(fig, title):
    """(the panel's axis, its twin or None) in ``fig``."""
    ax = next(a for a in fig.axes if a.get_title(loc="left") == title)
    twins = [a for a in fig.axes if a is not ax and a.get_position().bounds == ax.get_position().bounds]
    return ax, (twins[0] if twins else None)


def legend_texts(fig, title):
    ax, twin = axes_of(fig, title)
    legend = (twin.get_legend() if twin is not None else None) or ax.get_legend()
    return [t.get_text() for t in legend.get_texts()] if legend is not None else []


def drawn_values(ax):
    return [np.asarray(line.get_ydata(), dtype=float) for line in ax.get_lines()]


# --- the KL: its own panel, and the loss term as what it is ----------------------------------------
def test_the_raw_kl_has_its_own_panel_and_the_losses_panel_gets_coef_times_kl(tmp_path):
    kl, coef = [0.01, 0.02, 0.03, 0.04], [0.1, 0.2, 0.4, 0.8]  # an adaptive coefficient, logged after its update
    rows = [{"step": s + 1, "actor/pg_loss": 0.5 - 0.1 * s, "actor/kl_loss": kl[s], "kl/coef": coef[s]}
            for s in range(4)]
    run = load_run(write_rows(tmp_path / "kl", rows))
    # the loss at step s used the coefficient logged at step s-1 (at the first step: its own)
    assert np.allclose(run.get(KL_TERM)[1], [0.01 * 0.1, 0.02 * 0.1, 0.03 * 0.2, 0.04 * 0.4])
    losses = panel_series(panel("Losses"), [run])
    assert [s.key for s in losses] == ["actor/pg_loss", KL_TERM]
    assert "coef × KL" in losses[1].label and not any(s.right for s in losses)
    kl_panels = [p for p in PANELS if any(ln.key == "actor/kl_loss" for ln in p.lines)]
    assert len(kl_panels) == 1 and [ln.key for ln in kl_panels[0].lines] == ["actor/kl_loss"]

    fig = figure([run])
    losses_ax, twin = axes_of(fig, "Losses")
    assert twin is None
    values = drawn_values(losses_ax)
    assert any(np.allclose(v, run.get(KL_TERM)[1]) for v in values if len(v) == 4)
    assert not any(np.allclose(v, kl) for v in values if len(v) == 4)  # the raw KL is not a loss
    kl_ax, _ = axes_of(fig, kl_panels[0].title)
    assert any(np.allclose(v, kl) for v in drawn_values(kl_ax) if len(v) == 4)


def test_no_kl_term_without_a_kl_loss(tmp_path):
    run = load_run(write_rows(tmp_path / "r", [{"step": 1, "actor/pg_loss": 0.1, "kl/coef": 0.05}]))
    assert run.get(KL_TERM) is None
    assert [s.key for s in panel_series(panel("Losses"), [run])] == ["actor/pg_loss"]


# --- evaluation: points when few, one axis per kind --------------------------------------------------
def eval_rows(eval_steps, train_steps=10):
    rows = [{"step": s, "reward/mean": 0.3 + 0.03 * s} for s in range(1, train_steps + 1)]
    rows.insert(0, {"step": 0})
    for i, s in enumerate(eval_steps):
        rows[s].update({"eval/accuracy": 0.31 + 0.05 * i, "eval/pass@1": 0.30 + 0.05 * i,
                        "eval/pass@4": 0.55 + 0.05 * i, "eval/reward_mean": 0.31 + 0.05 * i, "eval/num_prompts": 50})
    return rows


def test_an_evaluation_before_and_after_is_points_on_one_fraction_axis(tmp_path):
    run = load_run(write_rows(tmp_path / "ba", eval_rows([0, 10])))
    accuracy = panel_series(panel("Evaluation (held out)"), [run])
    assert [s.key for s in accuracy] == ["eval/accuracy", "eval/pass@1", "eval/pass@4"]
    assert all(s.style == "none" and not s.right for s in accuracy)  # points, no line, no second axis
    assert len({s.marker for s in accuracy}) == 3
    reward = panel_series(panel("Evaluation reward"), [run])
    assert [(s.key, s.style, s.right) for s in reward] == [("eval/reward_mean", "none", False)]

    fig = figure([run])
    ax, twin = axes_of(fig, "Evaluation (held out)")
    assert twin is None
    lo, hi = ax.get_ylim()
    assert lo <= 0 and 1 <= hi < 1.2  # the whole 0–100 % scale
    assert all(line.get_linestyle() == "None" for line in ax.get_lines())
    assert {"31%", "30%", "55%", "36%", "35%", "60%"} <= {t.get_text() for t in ax.texts}  # values written beside
    reward_ax, reward_twin = axes_of(fig, "Evaluation reward")
    assert reward_twin is None and any(np.allclose(v, [0.31, 0.36]) for v in drawn_values(reward_ax))


def test_regular_evaluations_are_joined_by_lines(tmp_path):
    run = load_run(write_rows(tmp_path / "every2", eval_rows([0, 2, 4, 6, 8, 10])))
    assert all(s.style == "-" and s.marker is not None for s in panel_series(panel("Evaluation (held out)"), [run]))


# --- PPO clip fractions: left out when nothing can clip ------------------------------------------------
def clip_rows(value):
    return [{"step": s, "reward/mean": 0.5, "actor/pg_clipfrac": value, "actor/pg_clipfrac_low": value,
             "actor/pg_clipfrac_high": 0.0, "actor/pg_clipfrac_dual": 0.0} for s in range(1, 6)]  # fmt: skip


def test_all_zero_clip_fractions_leave_their_panel_out_and_say_so(tmp_path):
    grpo = load_run(write_rows(tmp_path / "grpo", clip_rows(0.0)))
    drawn, missing, zero = select_panels([grpo])
    assert "PPO clip fractions" not in [p.title for p in drawn] + missing
    assert zero == ["PPO clip fractions"]
    fig = figure([grpo])
    assert "PPO clip fractions" not in [a.get_title(loc="left") for a in fig.axes]
    header = " ".join(t.get_text() for t in fig.texts)  # the note may wrap over lines
    assert "all zero" in header and "PPO clip fractions" in header


def test_clip_fractions_are_drawn_when_any_run_clips(tmp_path):
    ppo = load_run(write_rows(tmp_path / "ppo", clip_rows(0.02)))
    grpo = load_run(write_rows(tmp_path / "grpo", clip_rows(0.0)))
    for runs in ([ppo], [grpo, ppo]):
        drawn, _, zero = select_panels(runs)
        assert "PPO clip fractions" in [p.title for p in drawn] and zero == []


# --- the reward's spread: ± std, not a min–max band that is always 0–1 -------------------------------------
def test_the_reward_band_is_mean_plus_minus_std_cut_to_min_max(tmp_path):
    rows = [{"step": 1, "reward/mean": 0.5, "reward/std": 0.1, "reward/min": 0.0, "reward/max": 1.0},
            {"step": 2, "reward/mean": 0.9, "reward/std": 0.3, "reward/min": 0.0, "reward/max": 1.0}]  # fmt: skip
    run = load_run(write_rows(tmp_path / "r", rows))
    steps, lo, hi, label = reward_spread(run)
    assert steps.tolist() == [1, 2] and label == "± 1 std"
    assert np.allclose(lo, [0.4, 0.6]) and np.allclose(hi, [0.6, 1.0])  # 0.9 + 0.3 cut to the max, 1.0
    fig = figure([run])
    ax, _ = axes_of(fig, "Reward")
    assert "± 1 std" in [c.get_label() for c in ax.collections]
    assert "min–max" not in legend_texts(fig, "Reward")


def test_without_a_logged_std_the_band_falls_back_to_min_max(tmp_path):
    run = load_run(write_rows(tmp_path / "r", [{"step": 1, "reward/mean": 0.5, "reward/min": 0.2, "reward/max": 0.7}]))
    steps, lo, hi, label = reward_spread(run)
    assert (steps.tolist(), lo.tolist(), hi.tolist(), label) == ([1.0], [0.2], [0.7], "min–max")
    assert reward_spread(load_run(write_rows(tmp_path / "m", [{"step": 1, "reward/mean": 0.5}]))) is None


# --- runs compared: a colour per run, named in every panel -----------------------------------------------
@pytest.mark.parametrize("n_runs", [2, 3])
def test_overlaid_runs_get_a_colour_each_named_in_every_panel_legend(tmp_path, make_run, n_runs):
    names = ["baseline", "candidate", "third"][:n_runs]
    runs = [load_run(make_run(tmp_path / name, steps=20, seed=i, ppo=i == 1)) for i, name in enumerate(names)]
    for p in select_panels(runs)[0]:
        if p.kind != "lines":
            continue
        series = panel_series(p, runs)
        colors = {j: {s.color for s in series if s.run == j} for j in {s.run for s in series}}
        assert all(len(c) == 1 for c in colors.values())  # a run keeps its colour across its series
        assert len({c.pop() for c in colors.values()}) == len(colors)  # and no two runs share one
        for j in colors:  # a run's series differ in style (or marker)
            looks = [(s.style, s.marker) for s in series if s.run == j]
            assert len(set(looks)) == len(looks)
        labels = [e.label for e in legend_entries(series, runs)]
        assert [runs[j].name for j in sorted(colors)] == labels[: len(colors)]
    fig = figure(runs)
    for title in ("Reward", "Policy entropy", "Batch signal", "Step time", "Evaluation (held out)"):
        assert set(names) <= set(legend_texts(fig, title)), title
    assert {"zero-std groups", "samples in loss"} <= set(legend_texts(fig, "Batch signal"))


# --- the tool demo: tool use drawn; reward functions on their own axis -----------------------------
def _tool_run_rows():
    return [{"step": s, "reward/mean": 0.1 * s, "reward/answer/mean": 0.2 * s, "reward/format/mean": 0.01 * s,
             "rollout/tool_calls_per_episode": 1.0 + 0.1 * s, "rollout/tool_errors": float(5 - s),
             "rollout/tool_calls": 10.0} for s in range(1, 5)]


def test_tool_calls_per_episode_and_tool_errors_are_drawn_each_on_its_own_axis(tmp_path):
    run = load_run(write_rows(tmp_path / "tools", _tool_run_rows()))
    drawn, _, _ = select_panels([run])
    assert "Tool use" in [p.title for p in drawn]
    series = panel_series(panel("Tool use"), [run])
    assert [(s.key, s.right) for s in series] == [("rollout/tool_calls_per_episode", False),
                                                  ("rollout/tool_errors", True)]
    ax, twin = axes_of(figure([run]), "Tool use")
    assert any(np.allclose(v, [1.1, 1.2, 1.3, 1.4]) for v in drawn_values(ax))
    assert twin is not None and any(np.allclose(v, [4, 3, 2, 1]) for v in drawn_values(twin))


def test_a_single_turn_run_has_no_tool_panel(tmp_path):
    run = load_run(write_rows(tmp_path / "plain", [{"step": 1, "reward/mean": 0.5}]))
    _, missing, _ = select_panels([run])
    assert "Tool use" in missing


def test_each_reward_function_mean_is_drawn_on_its_own_panel_not_the_combined_rewards(tmp_path):
    run = load_run(write_rows(tmp_path / "two", _tool_run_rows()))
    series = panel_series(panel("Reward functions"), [run])
    assert [(s.key, s.label) for s in series] == [("reward/answer/mean", "answer"), ("reward/format/mean", "format")]
    fig = figure([run])
    funcs, _ = axes_of(fig, "Reward functions")
    assert sorted(legend_texts(fig, "Reward functions")) == ["answer", "format"]
    assert any(np.allclose(v, [0.01, 0.02, 0.03, 0.04]) for v in drawn_values(funcs))
    reward, _ = axes_of(fig, "Reward")
    assert not any(np.allclose(v, [0.01, 0.02, 0.03, 0.04]) or np.allclose(v, [0.2, 0.4, 0.6, 0.8])
                   for v in drawn_values(reward) if len(v) == 4)  # the combined mean only


def test_one_reward_function_gets_no_panel_of_its_own(tmp_path):
    rows = [{"step": s, "reward/mean": 0.1 * s, "reward/answer/mean": 0.1 * s} for s in range(1, 4)]
    drawn, missing, _ = select_panels([load_run(write_rows(tmp_path / "one", rows))])
    assert "Reward functions" not in [p.title for p in drawn] + missing
