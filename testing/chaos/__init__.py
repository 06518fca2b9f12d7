"""Chaos testing of consume-transform-produce pipelines: the checker (checker.py, pure)
and what it reads from a broker (history.py)."""
