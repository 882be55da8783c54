"""Progress: a bar on a terminal; a concise line now and then in CI and in redirected output."""

from __future__ import annotations

import io

import pytest

from steadyrl import progress as progress_mod
from steadyrl.progress import format_duration, progress, progress_bar_wanted


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def no_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("STEADYRL_NO_PROGRESS", raising=False)


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(progress_mod.time, "monotonic", c)
    return c


def test_a_terminal_gets_a_bar_unless_ci_or_opted_out(monkeypatch):
    assert progress_bar_wanted(FakeTTY())
    assert not progress_bar_wanted(io.StringIO())  # redirected
    monkeypatch.setenv("CI", "true")
    assert not progress_bar_wanted(FakeTTY())
    monkeypatch.setenv("CI", "0")
    assert progress_bar_wanted(FakeTTY())
    monkeypatch.setenv("STEADYRL_NO_PROGRESS", "1")
    assert not progress_bar_wanted(FakeTTY())


def test_bar_mode_shows_progress_and_metrics_on_a_terminal():
    out = FakeTTY()
    with progress(10, "train", file=out) as bar:
        assert bar.mode == "bar"
        for _ in range(10):
            bar.update(reward=0.41234, kl=0.0031)
    text = out.getvalue()
    assert "train" in text and "10/10" in text and "reward=0.4123" in text


def test_lines_mode_prints_every_tenth_of_the_work_and_a_last_line(clock):
    out = io.StringIO()
    with progress(100, "train", file=out) as bar:
        assert bar.mode == "lines"
        for _ in range(95):
            clock.t += 2.0
            bar.update(reward=0.5, step_s=2.0)
    printed = out.getvalue().splitlines()
    assert len(printed) == 10  # at 10, 20, ..., 90, then the last line at 95
    assert printed[0] == "[train] 10/100 (10%) | 2 s/it | elapsed 20s | eta 3m00s | reward 0.5 | step_s 2"
    assert printed[-1].startswith("[train] 95/100 (95%)")


def test_lines_mode_also_prints_on_a_time_interval_for_slow_steps(clock):
    out = io.StringIO()
    bar = progress(1000, "eval", file=out, interval_s=30)
    for _ in range(3):
        clock.t += 31.0
        bar.update()
    assert len(out.getvalue().splitlines()) == 3
    bar.close()
    assert len(out.getvalue().splitlines()) == 3  # the last line is current: not repeated


def test_unknown_total_and_fast_work_read_well(clock):
    out = io.StringIO()
    with progress(None, "generate", file=out, every=50) as bar:
        for _ in range(50):
            clock.t += 0.01
            bar.update()
    assert out.getvalue().strip() == "[generate] 50 | 100 it/s | elapsed 0.5s"


def test_a_metric_not_logged_this_step_keeps_its_last_value(clock):
    out = io.StringIO()
    with progress(2, "train", file=out, every=1) as bar:
        bar.update(reward=0.5, kl=None)
        bar.update(reward=None)
    assert out.getvalue().splitlines()[-1].endswith("| reward 0.5")


def test_other_ranks_show_nothing(capsys):
    with progress(10, "train", is_main_process=False) as bar:
        bar.update(5)
    assert capsys.readouterr() == ("", "")


def test_format_duration():
    assert [format_duration(s) for s in (3.21, 42, 75.2, 4000, float("nan"))] == ["3.2s", "42s", "1m15s", "1h06m", "?"]


def test_a_resumed_run_counts_on_from_its_step_with_the_rate_of_this_process(clock):
    out = io.StringIO()
    with progress(210, "train", file=out, initial=189) as bar:
        assert bar.mode == "lines"
        for _ in range(21):
            clock.t += 2.0
            bar.update()
    printed = out.getvalue().splitlines()
    assert printed[0] == "[train] 191/210 (91%) | 2 s/it | elapsed 4.0s | eta 38s"  # every ~10% of the 21 left
    assert printed[-1].startswith("[train] 210/210 (100%) | 2 s/it | elapsed 42s")


def test_a_resumed_run_bar_starts_at_its_step():
    out = FakeTTY()
    with progress(210, "train", file=out, initial=189) as bar:
        bar.update()
    assert "190/210" in out.getvalue()


def test_the_training_line_shows_the_reward_that_trains():
    """Pure distillation trains on the teacher's signal: the task's reward is not shown as `reward`."""
    from types import SimpleNamespace

    from steadyrl.progress import train_fields

    m = {"reward/mean": 0.9, "distill/reverse_kl": 0.71, "response/length_mean": 12.0}
    assert train_fields(m) == {"reward": 0.9, "len": 12.0}
    assert train_fields(m, SimpleNamespace(name_or_path=None, task_rewards=True)) == {"reward": 0.9, "len": 12.0}
    mixed = train_fields(m, SimpleNamespace(name_or_path="t", task_rewards=True))
    assert mixed == {"reward": 0.9, "rkl": 0.71, "len": 12.0}
    pure = train_fields(m, SimpleNamespace(name_or_path="t", task_rewards=False))
    assert "reward" not in pure and list(pure)[:2] == ["rkl", "task"] and pure["rkl"] == 0.71
