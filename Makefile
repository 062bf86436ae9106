# Everything a newcomer needs: `make demo` and `make test` set themselves up.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
EXTRAS  := train,aws,azure,notebook,dev

.PHONY: demo test bench bench-gpu venv azurite tmux gnu-time clean

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[$(EXTRAS)]"
	touch $(STAMP)

# Azurite (the Azure Blob Storage emulator) for the Azure ML tests.
azurite: node_modules/.bin/azurite-blob
node_modules/.bin/azurite-blob: package.json
	npm install --no-audit --no-fund --silent

demo: venv
	$(BIN)/cloudddp submit jobs/digits-local.yaml --backend local

# tmux drives the live-metrics terminal test; installed from Debian's packages when missing.
tmux:
	@command -v tmux >/dev/null || (apt-get update -qq && apt-get install -y -qq tmux) || echo "tmux unavailable: its test will say so and skip"

test: venv azurite tmux
	PATH="$(CURDIR)/node_modules/.bin:$$PATH" $(BIN)/python -m pytest -q

# The SageMaker SDK (~1 GB) is only the render benchmark's baseline: it lives in its own venv.
.venv-sdk/.installed:
	test -x .venv-sdk/bin/python || $(PY) -m venv .venv-sdk
	.venv-sdk/bin/python -m pip install -q sagemaker
	touch .venv-sdk/.installed

# GNU time measures peak memory in the packaging benchmarks; installed from Debian's packages when missing.
gnu-time:
	@/usr/bin/time --version 2>&1 | grep -q GNU || (apt-get update -qq && apt-get install -y -qq time) || echo "GNU time unavailable: the benchmarks read peak memory with getrusage instead"

bench: venv azurite .venv-sdk/.installed gnu-time
	PATH="$(CURDIR)/node_modules/.bin:$$PATH" $(BIN)/python -m bench

bench-gpu: venv
	$(BIN)/python -m bench.gpu

clean:
	rm -rf $(VENV) .venv-sdk node_modules .cloudddp
