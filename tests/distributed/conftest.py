"""The data-parallel tests share ``dp_common.py`` (the fixed batch, configs, and ``torchrun`` in a
subprocess) with their torchrun workers: its folder goes on ``sys.path`` here."""

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
