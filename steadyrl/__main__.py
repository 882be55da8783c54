"""``python -m steadyrl`` is the ``steadyrl`` command (and what ``torchrun -m steadyrl`` runs)."""

from .cli import main

raise SystemExit(main())
