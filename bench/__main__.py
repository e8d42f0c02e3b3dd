"""`python -m bench`: the whole comparison suite (see bench/run.py)."""

from bench.run import main

main()
