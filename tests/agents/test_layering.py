"""steadyrl.agents sits below rollout/: importing it loads no trainer, rollout or rewards code."""

import subprocess
import sys


def test_importing_agents_loads_nothing_from_the_layers_above():
    code = ("import sys, steadyrl.agents; "
            "print(sorted(m for m in sys.modules if m.startswith(('steadyrl.trainer', 'steadyrl.rollout', "
            "'steadyrl.rewards', 'steadyrl.cli'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
