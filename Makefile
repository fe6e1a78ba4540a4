# Two commands matter: `make demo` and `make test` (see README.md). Everything else is
# what they depend on. Re-running is quick: the venv is made once (stamp file), and the
# C++ build is incremental (CMake + Ninja in build/).

PYTHON_BOOT ?= python3.11
VENV        := .venv
PY          := $(VENV)/bin/python
DEPS_STAMP  := $(VENV)/.cdynamo-deps
BUILD_DIR   := build
BUILD_TYPE  ?= RelWithDebInfo
# torch is pinned to the CPU build that lies on the machine; never let a resolver pick another.
TORCH_PIN   := torch==2.13.0

.PHONY: all venv build demo test test-cpp test-py bench bench-quick models models-train models-inductor models-deps clean

all: build

$(DEPS_STAMP): requirements-dev.txt
	test -x $(PY) || $(PYTHON_BOOT) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check $(TORCH_PIN) -r requirements-dev.txt
	# Development install of the package: the source tree is on sys.path, the extension is
	# built in place into src/cdynamo/ by CMake.
	$(PY) -c "import sysconfig,os; open(os.path.join(sysconfig.get_paths()['purelib'],'cdynamo-dev.pth'),'w').write(os.path.abspath('src')+'\n')"
	touch $@

venv: $(DEPS_STAMP)

# Real models (issue 11): timm and transformers. timm goes in with --no-deps (its other
# requirements are in requirements-models.txt): PyPI's torchvision is a CUDA build that
# cannot import beside the CPU torch, so it is kept out and timm imports through
# tools/models/tv_shim.py. The last two lines check that it worked.
MODELS_STAMP := $(VENV)/.cdynamo-models
TIMM_PIN     := timm==1.0.31
$(MODELS_STAMP): $(DEPS_STAMP) requirements-models.txt
	$(PY) -m pip install -q --disable-pip-version-check $(TORCH_PIN) -r requirements-models.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps $(TORCH_PIN) $(TIMM_PIN)
	$(PY) -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	$(PY) -c "import sys; sys.path.insert(0, 'tools/models'); import zoo; zoo._import_timm(); import transformers"
	touch $@

models-deps: $(MODELS_STAMP)

$(BUILD_DIR)/build.ninja: $(DEPS_STAMP) CMakeLists.txt
	PATH=$(abspath $(VENV))/bin:$$PATH cmake -S . -B $(BUILD_DIR) -G Ninja \
	  -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DPython_EXECUTABLE=$(abspath $(PY)) $(CMAKE_ARGS)

build: $(BUILD_DIR)/build.ninja
	PATH=$(abspath $(VENV))/bin:$$PATH cmake --build $(BUILD_DIR) -j2

demo: build
	$(PY) examples/demo.py

test-cpp: build
	cd $(BUILD_DIR) && PATH=$(abspath $(VENV))/bin:$$PATH ctest --output-on-failure

test-py: build $(MODELS_STAMP)
	$(PY) -m pytest -q tests

test: test-cpp test-py

bench: build
	$(PY) benchmarks/run.py

bench-quick: build
	$(PY) benchmarks/run.py --quick

# Each model in its own process; rewrites its sections of docs/models.md (see benchmarks/models.py).
models: build $(MODELS_STAMP)
	$(PY) benchmarks/models.py
	$(PY) benchmarks/models.py --train

models-train: build $(MODELS_STAMP)
	$(PY) benchmarks/models.py --train

models-inductor: build $(MODELS_STAMP)
	$(PY) benchmarks/models.py --inductor

clean:
	rm -rf $(BUILD_DIR) src/cdynamo/_C*.so
