"""``steadyrl --version`` and the ``--help`` pages: every page says where the config keys and the
documentation are."""

from __future__ import annotations

import pytest

from steadyrl import __version__, cli

PAGES = [[], ["train"], ["eval"], ["plot"], ["export"], ["doctor"], ["config"], ["config", "show"], ["convert"], ["selfcheck"]]


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"steadyrl {__version__}"


@pytest.mark.parametrize("command", PAGES, ids=lambda c: " ".join(c) or "steadyrl")
def test_every_help_page_points_to_config_show_and_the_docs(command, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main([*command, "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert "steadyrl config show" in out
    assert f"documentation: {cli.DOCS_DIR}" in out and (cli.DOCS_DIR / "configuration.md").is_file()


def test_plot_help_says_where_a_comparison_of_several_runs_goes_and_it_goes_there(tmp_path, capsys, monkeypatch):
    """`steadyrl plot A B` wrote comparison.png into the current directory while --help said RUN_DIR/dashboard.png."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from support_doctor import healthy_rows, write_run

    with pytest.raises(SystemExit):
        cli.main(["plot", "--help"])
    assert "with several runs: comparison.png in the current directory" in " ".join(capsys.readouterr().out.split())
    a, b = write_run(tmp_path / "a", healthy_rows()), write_run(tmp_path / "b", healthy_rows(1))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["plot", str(a), str(b)]) == 0
    assert (tmp_path / "comparison.png").is_file() and not (a / "dashboard.png").exists()
