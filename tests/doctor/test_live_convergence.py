"""The in-run doctor on a run still on its way to solving its prompts (issue 33, item 7): `make demo`
printed "Entropy collapsed" and "Most groups carry no signal" mid-run, then "healthy" at the end.
Detectors that the final report quiets on a solved run wait while the reward is still rising."""

import math

from support_doctor import INJECTIONS, healthy_rows, replay_live


def _printed(tmp_path, rows, capsys) -> str:
    replay_live(tmp_path, rows, finish=False)
    return capsys.readouterr().out


def _collapsing(reward) -> list[dict]:
    rows = healthy_rows()
    INJECTIONS["entropy_collapse"](rows, [])
    for r in rows[1:]:
        r["reward/mean"] = reward(r["step"])
    return rows


def test_entropy_falling_while_the_reward_still_rises_is_not_called_collapse_mid_run(tmp_path, capsys):
    rising = _collapsing(lambda s: 0.1 + 0.02 * s)  # 0.12 -> 0.9 over 40 steps: still climbing
    assert "Entropy collapsed" not in _printed(tmp_path, rising, capsys)


def test_entropy_collapse_with_a_reward_that_stopped_rising_is_still_printed_mid_run(tmp_path, capsys):
    stalled = _collapsing(lambda s: 0.3 + 0.2 * (1 - math.exp(-s / 3)))  # flat at 0.5 after step 15
    text = _printed(tmp_path, stalled, capsys)
    assert "Entropy collapsed (`entropy_collapse`" in text


def test_a_live_finding_is_worded_as_provisional(tmp_path, capsys):
    stalled = _collapsing(lambda s: 0.3 + 0.2 * (1 - math.exp(-s / 3)))
    line = next(x for x in _printed(tmp_path, stalled, capsys).splitlines() if "Entropy collapsed" in x)
    assert line.startswith("doctor: step 20, so far: ") and "provisional: report.md judges the whole run" in line


def test_a_live_finding_the_final_report_does_not_make_is_withdrawn_at_the_end(tmp_path, capsys):
    """make demo's shape: the reward stalls short of solved mid-run (entropy collapse printed), then the
    run solves its prompts; the final report is healthy, and the end says the mid-run line is withdrawn."""
    from support_doctor import write_run

    rows = _collapsing(lambda s: 0.5 if s <= 20 else 0.97)
    write_run(tmp_path, rows)
    replay_live(tmp_path, rows)
    out = capsys.readouterr().out
    assert "doctor: step 20, so far: Entropy collapsed" in out
    assert "doctor: withdrawn: Entropy collapsed (`entropy_collapse`, printed at step 20)" in out
    assert out.rstrip().endswith("report.md: healthy")


def test_a_live_finding_the_final_report_keeps_is_not_withdrawn(tmp_path, capsys):
    from support_doctor import write_run

    rows = _collapsing(lambda s: 0.5)
    write_run(tmp_path, rows)
    replay_live(tmp_path, rows)
    out = capsys.readouterr().out
    assert "withdrawn" not in out and "first: Entropy collapsed" in out
