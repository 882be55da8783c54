"""``bench_code_reward --isolation``: every sandbox level the machine gives scores the correct
sample 1.0 and reports the level the reward says it got."""

import sys

import pytest

from benchmarks import bench_code_reward

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the local sandbox needs Linux")


def test_each_level_runs_the_sample_and_names_its_isolation_level(capsys):
    rows = bench_code_reward.run_isolation(tests=2, rounds=1)
    assert rows, "no sandbox level could run"
    for name, ms, level in rows:
        assert ms > 0
        assert level == {"namespaces": 1, "namespaces + cgroup": 2, "bubblewrap view": 3,
                         "bubblewrap view + cgroup": 4}[name]


def test_the_table_names_its_command(tmp_path):
    args = bench_code_reward.argparse.Namespace(tests=2, isolation=1)
    body = bench_code_reward.isolation_table(args, ["--isolation", "1", "--tests", "2"])
    assert body.startswith("Command: `python -m benchmarks.bench_code_reward --isolation 1 --tests 2`")
    assert "| local sandbox |" in body
