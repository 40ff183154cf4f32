# The README's two commands. Each one does all set-up first (idempotent), so both work on a fresh machine.
PYTHON ?= python3
RUNS ?= leaderboards/runs

.PHONY: main test setup
setup:
	bash scripts/setup.sh

main: setup
	fusebench run quickstart --out $(RUNS) --leaderboard leaderboards

test: setup
	pytest -q -p no:cacheprovider
