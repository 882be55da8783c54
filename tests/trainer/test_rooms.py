"""The recipe's rooms import on their own: the builders (steadyrl.assembly) and the harness
(steadyrl.run) load without the recipe (steadyrl.recipe), which imports them, so there is no
import cycle whichever module a user or a test imports first."""

import subprocess
import sys

import pytest

ROOMS = ["steadyrl.assembly.setup", "steadyrl.run.state", "steadyrl.run.start", "steadyrl.run.asynchronous"]


@pytest.mark.parametrize("module", ROOMS)
def test_a_room_imports_first_and_without_the_recipe(module):
    code = f"import sys, {module}; print('steadyrl.recipe' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_the_recipe_is_still_where_users_import_it_from():
    code = "from steadyrl.recipe import train, evaluate_run; from steadyrl.recipe import train_step"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
