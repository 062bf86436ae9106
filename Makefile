# Everything a newcomer needs: `make demo` and `make test` set themselves up.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
EXTRAS  := train,aws,azure,notebook,frameworks,dev

.PHONY: demo test test-ready test-fast golden conformance mutants lint docs bench bench-gpu venv bytecode azurite system-deps system-deps-install sdk-data toolkits gnu-time clean

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt cloudddp/code/_tarloop.c  # pip builds the C extension in place
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[$(EXTRAS)]"
	touch $(STAMP)

# Azurite (the Azure Blob Storage emulator) for the Azure ML tests.
azurite: node_modules/.bin/azurite-blob
node_modules/.bin/azurite-blob: package.json package-lock.json
	npm ci --no-audit --no-fund --silent

demo: venv
	$(BIN)/cloudddp submit jobs/digits-local.yaml --backend local
	@echo "cloudddp is $(BIN)/cloudddp: '. $(BIN)/activate' puts it on your PATH"

# Debian packages that tests drive for real: tmux (the live-metrics terminal), Open MPI's mpirun (Azure ML's
# MPI distribution), Slurm and munge (a two-node cluster on this machine), gcc (the snapshot's C loops,
# cloudddp/code/_tarloop.c, built by `make venv`; Python's own headers come with it) and libslurm-dev's spank.h (the
# test cluster's SPANK plugin, tests/support/spank), slurmdbd and MariaDB (two clusters sharing accounting, for
# sbatch -M), OpenSSH's server (a login node for the Slurm backend's ssh path). Installed only when
# missing (~20 s here); without root or apt-get it says so in one line and the tests that need them skip (on CI,
# CI=true, it fails instead: a green CI must not hide a missing proof).
SYSTEM_PKGS := tmux openmpi-bin slurm-wlm munge gcc libslurm-dev slurmdbd mariadb-server openssh-server
MISSING_PKGS = for p in $(SYSTEM_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q ' installed$$' || echo $$p; done

# Two `make test` at once on a fresh machine: the second waits for the first's install under one lock, then installs
# what is still missing (apt's own lock refuses a second apt-get rather than waiting).
system-deps:
	@missing=$$($(MISSING_PKGS)); \
	[ -z "$$missing" ] || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && mkdir -p /run/lock \
		&& flock -w 1800 /run/lock/cloudddp-system-deps $(MAKE) --no-print-directory system-deps-install; } \
	|| { echo "system-deps: could not install" $$missing "with apt-get (needs root and Debian's archive): tests that need them skip and say why"; \
	     case "$$CI" in 1|true|TRUE|True|yes) echo "system-deps: CI=true, so a missing package fails the run"; exit 1;; esac; }

system-deps-install:
	@missing=$$($(MISSING_PKGS)); [ -z "$$missing" ] || { apt-get update -qq >/dev/null \
		&& DEBIAN_FRONTEND=noninteractive apt-get install -o DPkg::Lock::Timeout=600 -y -qq $$missing >/dev/null 2>&1; }

# Lint first (seconds): ruff's rules and format check on everything, mypy (strict) on the package, the
# import contracts (import-linter: a module imports only from layers below its own, a backend package only its own
# modules, the backends' shared ones and the layers below; docs/architecture.md), the code's shape (no function over
# 80 lines, no module over 500, but for the reasoned allowances in the script) and the map (every module named in
# its package's docstring and every wing's in docs/architecture.md: tests/support/map.py).
lint: venv
	$(BIN)/ruff check cloudddp tests bench src_train examples
	$(BIN)/ruff format --check cloudddp tests bench src_train examples
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m tests.support.shape
	$(BIN)/python -m tests.support.map

# The sagemaker-training versions the PyTorch images carry (tests/support/image/toolkits.json: 5.1.1 in the
# AL2023 images), each in .cache/toolkits for the SageMaker rehearsal (~5 s each, once; the newest is the venv's).
toolkits: venv
	$(BIN)/python -c "from tests.support.sagemaker_container import TOOLKITS, toolkit_folder; [toolkit_folder(v) for v in TOOLKITS]"

# The project's own modules compiled once, up front. The tests start many hundreds of Python processes that import
# cloudddp (CLI calls, supervisors, shims, rigs); where PYTHONDONTWRITEBYTECODE is set, as on this machine, none of
# them writes the bytecode it compiled, so each compiled cloudddp again (0.3 s of the 0.9 s that importing the CLI,
# the supervisor and the API takes; tests/backends/local/test_runs.py used 14% less CPU with it). Bytecode older
# than its source is ignored, as always (make mutants).
bytecode: venv
	$(BIN)/python -m compileall -q -j 0 cloudddp src_train tests bench examples

# Four pytest workers (pytest-xdist) on the 2-core CI machine: with two, the cores sat idle while tests waited
# (graces, polls, a 60 s save); four keep both busy throughout, so more would not help (a fresh clone's make test:
# 34-41 min with four, 54 with two; docs/development.md). The tests that share the Slurm cluster or the second Unix
# user run on one worker, one after another (tests/conftest.py: xdist_group). TEST_WORKERS=0 runs everything in
# this process.
TEST_WORKERS ?= 4
test: test-ready
	PATH="$(CURDIR)/node_modules/.bin:$$PATH" $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup -m "not conformance"

# The set-up, its independent steps side by side (pip's install keeps one core busy; npm, the second venv, the
# bytecode and lint fill the other), each step's output kept together. system-deps comes first: its gcc is what
# both venvs build the snapshot's C loops with, in place, so the second venv waits for the first.
test-ready: system-deps
	$(MAKE) -j 3 --output-sync=target venv bytecode azurite sdk-data toolkits .venv-azureml-mlflow/.installed lint

# The framework matrix in full (docs/stopping.md#conformance): make test's cells, every example at every local shape
# and on Slurm, Hugging Face's own run_clm.py where a developer has put it in tests/fixtures/unchanged/ (SOURCES.md
# says which), and the local stop-and-resume cells once more with the oldest framework versions tested (OLDER).
OLDER := .venv-older-frameworks
OLDER_PINS := "lightning==2.5.*" "transformers==5.18.*"
conformance: venv bytecode azurite system-deps toolkits $(OLDER)/.installed
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[hf-examples]"
	PATH="$(CURDIR)/node_modules/.bin:$$PATH" $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup \
		tests/across_backends/test_unchanged.py tests/across_backends/test_examples.py \
		tests/across_backends/test_frameworks.py tests/backends/*/test_frameworks.py
	$(OLDER)/bin/python -m pytest -q -p no:cacheprovider -m "not conformance" tests/across_backends/test_unchanged.py

$(OLDER)/.installed: pyproject.toml constraints.txt
	test -x $(OLDER)/bin/python || $(PY) -m venv $(OLDER)
	$(OLDER)/bin/python -m pip install -q --upgrade pip
	$(OLDER)/bin/python -m pip install -q -c constraints.txt -e ".[train,dev]" $(OLDER_PINS)
	touch $(OLDER)/.installed

# Proof by mutation (docs/guarantees.md): each curated mutant (tests/support/mutant_list.py) is applied alone to a copy
# of the project and the tests its guarantee names must fail; prints each verdict and the kill ratio and records them
# in docs/proof.md. MUTANT_JOBS at a time (most of their tests wait on training processes). Not part of make test (it
# reruns the slow tests once per mutant).
MUTANT_JOBS ?= 2
mutants: venv bytecode azurite system-deps toolkits
	PATH="$(CURDIR)/node_modules/.bin:$$PATH" $(BIN)/python -m tests.support.mutants -j $(MUTANT_JOBS) $(MUTANTS)

# The options tables in docs/ (between `<!-- options: NAME -->` and `<!-- /options -->`), written anew from the spec's
# models and the backends' sections (tests/support/option_tables.py); tests/project/test_docs_current.py fails
# when one is stale.
docs: venv
	$(BIN)/python -m tests.support.option_tables --update

# Every backend's rendered plan for a set of jobs, kept under tests/golden/ (tests/support/golden.py): after a change
# that is meant to move a request, this writes them anew, and `git diff tests/golden` shows its effect everywhere.
golden: venv
	$(BIN)/python -m tests.support.golden --update

# The quick loop: no torchrun, no emulators.
test-fast: venv bytecode
	$(BIN)/python -m pytest -q -m "not slow"

# The SageMaker SDK's own image table (sagemaker-core's pytorch.json), to cross-check cloudddp's image data: the
# wheel of the release the data names (cloudddp/data/sagemaker_pytorch_training.json), downloaded, not installed.
SDK_DATA := $(VENV)/sdk-data
sdk-data: venv
	@version=$$($(BIN)/python -c "import json,re; print(re.search(r'sagemaker-core (\S+)', json.load(open('cloudddp/data/sagemaker_pytorch_training.json'))['source']).group(1))"); \
	test -f $(SDK_DATA)/sagemaker_core-$$version-py3-none-any.whl \
	|| $(BIN)/python -m pip download -q --no-deps -d $(SDK_DATA) "sagemaker-core==$$version"

# The SageMaker SDK (~1 GB) is only the render benchmark's baseline: it lives in its own venv.
.venv-sdk/.installed:
	test -x .venv-sdk/bin/python || $(PY) -m venv .venv-sdk
	.venv-sdk/bin/python -m pip install -q sagemaker
	touch .venv-sdk/.installed

# azureml-mlflow (the azureml:// tracking plugin) pins mlflow-skinny<=3.15, below the dev extra's mlflow server:
# cloudddp with .[azure,azure-mlflow] lives in its own venv, from which the plugin's test reads an Azure run's metrics.
.venv-azureml-mlflow/.installed: pyproject.toml constraints.txt | $(STAMP)
	test -x .venv-azureml-mlflow/bin/python || $(PY) -m venv .venv-azureml-mlflow
	.venv-azureml-mlflow/bin/python -m pip install -q --upgrade pip
	.venv-azureml-mlflow/bin/python -m pip install -q -c constraints.txt -e ".[azure,azure-mlflow]"
	touch .venv-azureml-mlflow/.installed

# GNU time measures peak memory in the packaging benchmarks; installed from Debian's packages when missing.
gnu-time:
	@/usr/bin/time --version 2>&1 | grep -q GNU || (apt-get update -qq && apt-get install -y -qq time) || echo "GNU time unavailable: the benchmarks read peak memory with getrusage instead"

bench: venv azurite .venv-sdk/.installed gnu-time
	PATH="$(CURDIR)/node_modules/.bin:$$PATH" $(BIN)/python -m bench

bench-gpu: venv
	$(BIN)/python -m bench.gpu

clean:
	rm -rf $(VENV) .venv-sdk .venv-azureml-mlflow node_modules .cloudddp .cache
