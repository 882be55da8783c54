"""``python -m steadyrl.plot RUN_DIR [RUN_DIR ...] [--out FILE]``."""

from . import main

raise SystemExit(main())
