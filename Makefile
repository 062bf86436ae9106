# Everything a newcomer needs: `make demo` and `make test` set themselves up.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
EXTRAS  := train,aws,azure,notebook,dev

.PHONY: demo test bench bench-gpu venv azurite clean

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

test: venv azurite
	PATH="$(CURDIR)/node_modules/.bin:$$PATH" $(BIN)/python -m pytest -q

bench: venv azurite
	PATH="$(CURDIR)/node_modules/.bin:$$PATH" $(BIN)/python -m bench

bench-gpu: venv
	$(BIN)/python -m bench.gpu

clean:
	rm -rf $(VENV) node_modules .cloudddp
