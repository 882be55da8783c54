"""The config validates ``trainer.halt_on`` against the detectors' names without importing the doctor
(which sits above it): its list must be the registry's."""

import subprocess
import sys

from steadyrl.config.doctor_checks import DETECTOR_NAMES
from steadyrl.doctor import DETECTORS


def test_the_configs_detector_names_are_the_registrys_in_order():
    assert DETECTOR_NAMES == tuple(DETECTORS)


def test_loading_a_config_with_halt_on_imports_no_doctor():
    code = ("import sys; from steadyrl.config import load_config; "
            "load_config(None, ['trainer.halt_on=[entropy_collapse]']); "
            "print(sorted(m for m in sys.modules if m.startswith(('steadyrl.doctor', 'steadyrl.rewards'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
