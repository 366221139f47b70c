# cmbuyer — `make` lists the targets. Everything installs itself: a fresh clone needs only python3.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DATA_DIR ?= var
SOAK_ITERATIONS ?= 200
# pytest-xdist workers of `make test`'s parallel pass (CI has 2 cores; the tests mostly wait on processes,
# sockets and fsync); tests marked `serial` (they measure time, CPU or memory) run after it, alone
TEST_WORKERS ?= 2
DEMO_PORT ?= $(or $(CMBUYER_PORT),8080)

.DEFAULT_GOAL := help
.PHONY: help setup browser font test test-fast lint serve demo demo-once bench soak clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[1m%-11s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml setup.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	@touch $(STAMP)

setup: $(STAMP) ## create .venv/ and install cmbuyer with its test extras (idempotent)

browser: ## make sure Debian's chromium and a CJK font are installed (browser tests, screenshots)
	@if [ ! -x /usr/bin/chromium ] || [ ! -f /usr/share/fonts/truetype/wqy/wqy-microhei.ttc ]; then \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq \
			chromium fonts-wqy-microhei >/dev/null; \
	fi

font: setup ## make sure a CJK font is installed (the simulated phones' screenshots show Chinese, not boxes)
	@if $(BIN)/python -c "import sys; from cmbuyer.phonesim.screenshot import has_cjk_font; sys.exit(not has_cjk_font())"; then \
		echo "字体：已安装中文字体（演示的截图能显示中文）"; \
	else \
		echo "字体：没有找到中文字体，正在安装 Debian 的 fonts-wqy-microhei（否则截图里的中文是方框）"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq fonts-wqy-microhei >/dev/null \
			|| echo "字体：无法安装；请把 CMBUYER_PHONESIM_FONT 设为一个含中文字形的 .ttc/.ttf 文件" >&2; \
	fi

test: setup browser ## run every test (unit, server, agent, simulator, browser, end to end): TEST_WORKERS in parallel, then the serial ones alone
	$(BIN)/pytest -q -n $(TEST_WORKERS) -m "not serial"
	$(BIN)/pytest -q -m serial

test-fast: setup ## run the tests without the browser and end-to-end suites (parallel, then the serial ones)
	$(BIN)/pytest -q -n $(TEST_WORKERS) -m "not browser and not e2e and not serial"
	$(BIN)/pytest -q -m "serial and not browser and not e2e"

lint: setup ## ruff check, ruff format --check, mypy --strict on the server, the agent, the schemas and phonesim
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@# mypy reads its packages and the checked-in import root typecheck/ from pyproject.toml
	$(BIN)/mypy

serve: setup ## run the server on the data dir DATA_DIR (default ./var), initializing it first
	@test -f $(DATA_DIR)/cmbuyer.env || $(BIN)/cmbuyer-server --data-dir $(DATA_DIR) init
	$(BIN)/cmbuyer-server --data-dir $(DATA_DIR) serve

demo: setup font ## the main job: server + 2 simulated phones + 2 agents + demo tasks, until Ctrl-C (DEMO_PORT=8080)
	$(BIN)/python -m demo.run --port $(DEMO_PORT)

demo-once: setup font ## the same demo headless; exits 0 only if every task reached its expected state
	$(BIN)/python -m demo.run --once --port $(DEMO_PORT)

bench: setup ## benchmarks in bench/ (ratios against a baseline measured in the same run)
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

soak: setup ## long crash/soak loops (SOAK_ITERATIONS iterations, default 200) and the 32-phone fleet bench
	CMBUYER_SOAK_ITERATIONS=$(SOAK_ITERATIONS) $(BIN)/pytest -q -m "slow or e2e"
	$(BIN)/python bench/fleet.py --phones 32

clean: ## remove the venv, caches, test artifacts and the demo's data (never a data dir with a real database)
	@real=$$(find var -name cmbuyer.sqlite3 -not -path 'var/demo/*' 2>/dev/null | head -n 1); \
	if [ -n "$$real" ]; then \
		echo "make clean：拒绝执行：$$real 是 var/demo 之外的数据库（真实的数据目录？）。" >&2; \
		echo "请先备份（cmbuyer-server backup），确有需要再手动删除该目录。" >&2; \
		exit 1; \
	fi
	rm -rf $(VENV) var test-artifacts .pytest_cache .mypy_cache .ruff_cache *.egg-info
