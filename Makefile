# Front door of oxygen_ros. `make help` lists the targets.
PYTHON_VENV := .venv/bin/python
PYTEST_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help setup test check-colcon demo clean

help: ## show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  make %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

setup: ## create/refresh .venv: pinned deps, oxygen_msgs (rosidl), oxygen_ros (editable)
	@scripts/setup.sh

test: setup ## set up if needed, then run the whole test suite (PYTEST_ARGS=... to pass options)
	$(PYTHON_VENV) -m pytest test $(PYTEST_ARGS)

check-colcon: setup ## build oxygen_msgs + oxygen_ros with colcon in a throwaway workspace
	@scripts/check_colcon.sh

demo: setup ## sim robot + node (config/smol_panda.yaml: the trained policy on CPU) + recorder for ~1 min; report in out/ (DEMO_ARGS=...)
	.venv/bin/oxygen demo $(DEMO_ARGS)

clean: ## remove build outputs (keeps .venv; delete it by hand for a full reset)
	rm -rf build log install .pytest_cache
