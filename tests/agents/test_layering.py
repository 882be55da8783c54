"""steadyrl.agents sits below rollout/: importing it loads no trainer, rollout or rewards code."""

import subprocess
import sys


def test_importing_agents_loads_nothing_from_the_layers_above():
    code = ("import sys, steadyrl.agents; "
            "print(sorted(m for m in sys.modules if m.startswith(('steadyrl.trainer', 'steadyrl.rollout', "
            "'steadyrl.rewards', 'steadyrl.cli'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_importing_the_environment_adapters_loads_nothing_from_the_layers_that_use_them():
    """steadyrl.envs sits below data/, rewards/ and agents/ (they import it): it imports none of them,
    nor any adapter's package until a spec names it."""
    code = ("import sys, steadyrl.envs, steadyrl.envs.rows, steadyrl.envs.reasoning_gym, steadyrl.envs.textarena, "
            "steadyrl.envs.openenv; "
            "print(sorted(m for m in sys.modules if m.startswith(('steadyrl.trainer', 'steadyrl.rollout', "
            "'steadyrl.rewards', 'steadyrl.cli', 'steadyrl.agents', 'steadyrl.data', 'reasoning_gym', 'textarena', "
            "'openenv'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
