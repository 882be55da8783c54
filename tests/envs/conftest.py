"""The CLI tests' ``steadyrl_cli`` fixture (a fresh ``python -m steadyrl`` process, offline, one thread)."""

from cli.conftest import steadyrl_cli  # noqa: F401
