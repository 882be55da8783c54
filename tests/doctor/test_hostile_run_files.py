"""A run directory is someone else's data (issue 30, items 5 and 7).

* Model-written text (a completion with OSC 52 clipboard writes, screen clears, a right-to-left
  override) and the run's config values (a line break that would make a line of its own) reach the
  console and report.md with every control character shown as a visible escape.
* steadyrl never follows a link inside a run directory, reading or writing: ``report.md ->
  ~/.ssh/authorized_keys``, ``metrics.jsonl -> /some/other/file`` are refused with exit 2 naming the
  link, and the file the link points to is unchanged.
"""

from __future__ import annotations

import json

import pytest
from support_doctor import INJECTIONS, healthy_rows, healthy_samples, write_run

from steadyrl.cli import main
from steadyrl.printable import printable

HOSTILE = "ok\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x1b[H\u202eevil\x9b\x00done"
ESCAPES = ("\x1b", "\x07", "\u202e", "\x9b", "\x00")


def _length_run(tmp_path, config=None):
    rows, samples = healthy_rows(), healthy_samples()
    INJECTIONS["truncation"](rows, samples)
    for row in samples:
        row["completion"] = HOSTILE + row["completion"]
    return write_run(tmp_path / "run", rows, samples, config)


def test_printable_shows_control_characters_as_escapes_and_keeps_layout():
    assert printable("a\x1b[2Jb\n\tc\u202e") == "a\\x1b[2Jb\n\tc\\u202e"
    assert printable("a\nb", keep="") == "a\\x0ab"
    assert printable("lone \ud800 surrogate") == "lone \\ud800 surrogate"
    text = "\x1b" * 100_000  # one pass: linear in the text
    assert printable(text) == "\\x1b" * 100_000


def test_doctor_prints_completions_with_control_characters_escaped(tmp_path, capsys):
    assert main(["doctor", str(_length_run(tmp_path))]) == 1
    out = capsys.readouterr().out
    assert "\\x1b]52;c;" in out and "\\u202e" in out
    assert not any(c in out for c in ESCAPES)


def test_report_md_of_plot_escapes_completions_and_config_values(tmp_path):
    pytest.importorskip("matplotlib")
    config = 'rollout:\n  max_new_tokens: "512\\n# injected heading\\n\\x1b[2J"\n'
    run = _length_run(tmp_path, config)
    assert main(["plot", str(run)]) == 0
    report = (run / "report.md").read_text()
    assert not any(c in report for c in ESCAPES)
    assert "\\x1b]52" in report
    assert not any(line.startswith("# injected") for line in report.splitlines())
    assert "512\\x0a# injected heading\\x0a\\x1b[2J" in report


def test_doctor_output_file_escapes_too(tmp_path):
    out = tmp_path / "triage.md"
    assert main(["doctor", str(_length_run(tmp_path)), "--output", str(out)]) == 1
    assert not any(c in out.read_text() for c in ESCAPES)


@pytest.mark.parametrize("command", ["plot", "doctor-output"])
def test_a_report_md_link_is_refused_and_its_target_unchanged(tmp_path, capsys, command):
    pytest.importorskip("matplotlib")
    run = write_run(tmp_path / "run", healthy_rows(), healthy_samples())
    keys = tmp_path / "authorized_keys"
    keys.write_text("ssh-ed25519 AAAA mine\n")
    link = run / ("report.md" if command == "plot" else "triage.md")
    link.symlink_to(keys)
    argv = ["plot", str(run)] if command == "plot" else ["doctor", str(run), "--output", str(link)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert str(link) in err and "symbolic link" in err
    assert keys.read_text() == "ssh-ed25519 AAAA mine\n"


def test_a_dashboard_link_is_refused_and_its_target_unchanged(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    run = write_run(tmp_path / "run", healthy_rows(), healthy_samples())
    target = tmp_path / "precious"
    target.write_text("keep")
    (run / "dashboard.png").symlink_to(target)
    assert main(["plot", str(run)]) == 2
    assert "dashboard.png" in capsys.readouterr().err and target.read_text() == "keep"


@pytest.mark.parametrize("command, name", [(c, n) for c in ("doctor", "plot")
                                            for n in ("metrics.jsonl", "samples.jsonl", "config.yaml", "tracking.json")
                                            if (c, n) != ("doctor", "tracking.json")])  # the doctor reads no tracking.json
def test_a_linked_run_file_is_not_read(tmp_path, capsys, name, command):
    if command == "plot":
        pytest.importorskip("matplotlib")
    run = write_run(tmp_path / "run", healthy_rows(), healthy_samples())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes((run / name).read_bytes() if (run / name).exists() else json.dumps({}).encode())
    (run / name).unlink(missing_ok=True)
    (run / name).symlink_to(elsewhere)
    assert main([command, str(run)]) == 2
    err = capsys.readouterr().err
    assert str(run / name) in err and "symbolic link" in err


def _hostile_names_run(tmp_path):
    rows = healthy_rows()
    for row in rows:
        if row["step"] >= 1:
            row["reward/$\\frac{\x1b[2J/mean"] = row["reward/correct/mean"]
    run = write_run(tmp_path / "run", rows, healthy_samples())
    (run / "tracking.json").write_text(json.dumps({"run_name": "$x^{\x1b]52;c;aGk=\x07"}))
    return run


def test_plot_draws_hostile_run_and_reward_names_as_text(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from steadyrl.plot import load_run

    run = _hostile_names_run(tmp_path)
    assert main(["plot", str(run)]) == 0, capsys.readouterr().err
    loaded = load_run(run)
    assert loaded.name == "\\$x^{\\x1b]52;c;aGk=\\x07"
    assert "reward/\\$\\frac{\\x1b[2J/mean" in loaded.series


def test_the_demo_transcript_is_printed_with_control_characters_escaped(capsys, monkeypatch):
    import types

    import torch

    from steadyrl.assembly import demo as builders

    episode = types.SimpleNamespace(messages=[{"role": "assistant", "content": "hi\x1b]52;c;aGk=\x07\x1b[2J"}],
                                    truncation=None)
    gen = types.SimpleNamespace(episodes=[episode], completions=["x"])
    monkeypatch.setattr("steadyrl.rollout.driver.rollout", lambda *a, **k: gen)
    config = types.SimpleNamespace(demo=types.SimpleNamespace(task="tool"), rollout=None)
    prompt = types.SimpleNamespace(messages=[{"role": "user", "content": "q"}], text="q")
    builders.transcript_printer(config, [prompt], None, None, torch.device("cpu"))(None, "before")
    out = capsys.readouterr().out
    assert "held-out transcript before RL" in out and "\\x1b]52" in out
    assert "\x1b" not in out and "\x07" not in out
