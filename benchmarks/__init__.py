"""steadyrl benchmarks: scripts, not timed unit tests. ``python -m benchmarks.run_all`` runs them all.

Every number a benchmark prints comes with the command that produced it and the machine it ran on.
"""
