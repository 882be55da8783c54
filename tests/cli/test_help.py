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
