# The two commands a newcomer needs: `make run` and `make test` (both install what they need).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)

export LITELLM_LOCAL_MODEL_COST_MAP := True
export NO_MKDOCS_2_WARNING := 1   # mkdocs-material's banner about its successor, on every build

.PHONY: run test lint types unit reliability docs docs-build install model redis chromium claude codex bench bench-litellm bench-micro clean

run: install model   ## start the local model and overspill on :4000 with config.yaml
	scripts/run-local.sh

test: install model redis chromium claude codex   ## lint, types, and every test (end-to-end against the real local model)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/mkdocs build --strict --quiet
	$(BIN)/pytest -q -p no:cacheprovider -n 2 --dist worksteal

lint: install   ## ruff and the import contracts
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/lint-imports

types: install
	$(BIN)/mypy

unit: install redis   ## the tests that need no local model
	$(BIN)/pytest -q -m "not e2e"

reliability: install redis   ## the reliability and security suite, full example counts, a table per area
	OVERSPILL_RELIABILITY=full $(BIN)/pytest -q -p no:cacheprovider -m reliability

docs: install   ## serve the documentation site on http://127.0.0.1:8000 (rebuilt on save)
	$(BIN)/mkdocs serve --strict

docs-build: install   ## build the site into var/site with every warning an error
	$(BIN)/mkdocs build --strict

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $@

redis:   ## Debian's redis-server, for the shared-store tests
	scripts/ensure-redis.sh

chromium:   ## Debian's Chromium, for the browser end-to-end test (a page calling overspill)
	scripts/ensure-chromium.sh

claude:   ## Claude Code (npm, pinned) in var/node, for its end-to-end tests (Node from Debian if missing)
	scripts/claude-code.sh > /dev/null

codex:   ## OpenAI's Codex CLI (npm, pinned) in var/codex, for its end-to-end tests (Node from Debian if missing)
	scripts/codex.sh > /dev/null

model:   ## build llama-server and fetch SmolLM2 (cached in ~/.cache/overspill)
	PYTHON=$(BIN)/python scripts/local-model.sh > /dev/null

bench: install   ## gateway overhead: mock, passthroughs, LiteLLM proxy, overspill in one run (var/bench/)
	$(BIN)/python -m bench.gateway $(ARGS)

bench-litellm: install   ## the litellm road and the Anthropic wire: overspill against the LiteLLM proxy
	$(BIN)/python -m bench.gateway --groups chat-anthropic,chat-litellm-road \
		--target litellm --target overspill $(ARGS)

bench-micro: install redis   ## the in-process benchmarks (pytest-benchmark; ARGS="-k splice" picks some)
	$(BIN)/pytest bench/micro -p no:cacheprovider --benchmark-only \
		--benchmark-timer time.process_time --benchmark-columns min,median,iqr,rounds \
		--benchmark-sort name $(ARGS)

clean:
	rm -rf $(VENV) var .mypy_cache .ruff_cache .pytest_cache .hypothesis
