# Two commands matter: `make demo` and `make test` (see README.md). Everything else is
# what they depend on. Re-running is quick: the venv is made once (stamp file), and the
# C++ build is incremental (CMake + Ninja in build/).

# PY: the CPython version to build and test for (`make test PY=3.12`). 3.11 keeps the
# historical .venv and build/; another version gets its own venv and build dir.
PY          ?= 3.11
ifeq ($(PY),3.11)
VENV        := .venv
BUILD_DIR   := build
else
VENV        := .venv-$(PY)
BUILD_DIR   := build-$(PY)
endif
PYTHON_BOOT ?= python$(PY)
PYEXE       := $(VENV)/bin/python
DEPS_STAMP  := $(VENV)/.cdynamo-deps
BUILD_TYPE  ?= RelWithDebInfo
# torch is pinned to the CPU build that lies on the machine; never let a resolver pick another.
TORCH_PIN   := torch==2.13.0

.PHONY: all venv build demo test test-cpp test-py bench bench-quick fuzz sanitize sanitize-subset conformance clean package-test \
        models models-train models-inductor models-deps

all: build

$(DEPS_STAMP): requirements-dev.txt
	test -x $(PYEXE) || $(PYTHON_BOOT) -m venv $(VENV)
	$(PYEXE) -m pip install -q --disable-pip-version-check $(TORCH_PIN) -r requirements-dev.txt
	# Development install of the package: the source tree is on sys.path, the extension is
	# built in place into src/cdynamo/ by CMake.
	$(PYEXE) -c "import sysconfig,os; open(os.path.join(sysconfig.get_paths()['purelib'],'cdynamo-dev.pth'),'w').write(os.path.abspath('src')+'\n')"
	# CDYNAMO=1 in the environment: cdynamo is imported (and installs itself) at start-up.
	cp src/cdynamo-env.pth $$($(PYEXE) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/
	# The capture report's test loads it in a headless browser (skipped, saying so, without one).
	command -v chromium >/dev/null || (command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || \
	  echo "chromium could not be installed: tests/api/test_run_trace_report.py will skip the browser check"
	touch $@

venv: $(DEPS_STAMP)

# Real models: timm and transformers. timm goes in with --no-deps (its other
# requirements are in requirements-models.txt): PyPI's torchvision is a CUDA build that
# cannot import beside the CPU torch, so it is kept out and timm imports through
# tools/models/tv_shim.py. The last two lines check that it worked.
MODELS_STAMP := $(VENV)/.cdynamo-models
TIMM_PIN     := timm==1.0.31
$(MODELS_STAMP): $(DEPS_STAMP) requirements-models.txt
	$(PYEXE) -m pip install -q --disable-pip-version-check $(TORCH_PIN) -r requirements-models.txt
	$(PYEXE) -m pip install -q --disable-pip-version-check --no-deps $(TORCH_PIN) $(TIMM_PIN)
	$(PYEXE) -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	$(PYEXE) -c "import sys; sys.path.insert(0, 'tools/models'); import zoo; zoo._import_timm(); import transformers"
	touch $@

models-deps: $(MODELS_STAMP)

$(BUILD_DIR)/build.ninja: $(DEPS_STAMP) CMakeLists.txt
	PATH=$(abspath $(VENV))/bin:$$PATH cmake -S . -B $(BUILD_DIR) -G Ninja \
	  -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DPython_EXECUTABLE=$(abspath $(PYEXE)) $(CMAKE_ARGS)

build: $(BUILD_DIR)/build.ninja
	PATH=$(abspath $(VENV))/bin:$$PATH cmake --build $(BUILD_DIR) -j2

demo: build
	$(PYEXE) examples/demo.py

test-cpp: build
	cd $(BUILD_DIR) && PATH=$(abspath $(VENV))/bin:$$PATH ctest --output-on-failure

test-py: build $(MODELS_STAMP)
	$(PYEXE) -m pytest -q tests

test: test-cpp test-py

# The differential fuzzer (tools/fuzz/run.py): N random programs from SEED, each run eagerly
# and under cdynamo and compared; failures are shrunk and listed (build/fuzz/seed-SEED/).
SEED ?= 1
N    ?= 1000
fuzz: build
	$(PYEXE) tools/fuzz/run.py --seed $(SEED) -n $(N)

# The whole suite against an ASan+UBSan build of the extension, in its own build dir
# (build-asan/), built in place over src/cdynamo/_C*.so: `make build` restores the normal one.
# SANITIZE_TESTS: the pytest paths (default: all of tests/).
ASAN_DIR := build-asan
SANITIZE_TESTS ?= tests
# What CI runs sanitized after `make test` (.ci/run): the C++ unit tests and the suites that
# drive the hook, the guards, the runtime and the graph builder hardest (threads, faults,
# memory, graph breaks and resume code, the graph builder's shortcuts, golden graphs, the
# fuzzer's fixed-seed run); the conformance, semantics, api, dynamic and models suites stay
# unsanitized (the whole suite sanitized does not fit CI's 90 minutes with room to spare).
SANITIZE_SUBSET := tests/guards tests/reliability tests/capture tests/golden tests/graph_breaks tests/fuzz
sanitize-subset:
	$(MAKE) sanitize SANITIZE_TESTS="$(SANITIZE_SUBSET)"

sanitize: $(DEPS_STAMP)
	PATH=$(abspath $(VENV))/bin:$$PATH cmake -S . -B $(ASAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DPython_EXECUTABLE=$(abspath $(PYEXE)) -DCDYNAMO_SANITIZE=ON $(CMAKE_ARGS)
	# Both builds link the same file (src/cdynamo/_C*.so), and ninja does not relink an
	# output that is newer than its inputs: without the rm, the second run would test the
	# normal extension (nothing sanitized), and the rebuild below would keep the ASan one.
	rm -f src/cdynamo/_C*.so
	PATH=$(abspath $(VENV))/bin:$$PATH cmake --build $(ASAN_DIR) -j2
	ldd src/cdynamo/_C*.so | grep -q libasan || (echo "src/cdynamo/_C*.so is not the ASan build" >&2; exit 1)
	cd $(ASAN_DIR) && ASAN_OPTIONS=detect_leaks=0 PATH=$(abspath $(VENV))/bin:$$PATH ctest --output-on-failure
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libstdc++.so)" \
	ASAN_OPTIONS=detect_leaks=0,abort_on_error=1,allocator_may_return_null=1 \
	UBSAN_OPTIONS=print_stacktrace=1,halt_on_error=1 PYTHONMALLOC=malloc \
	  $(PYEXE) -m pytest -q -p no:cacheprovider $(SANITIZE_TESTS); rc=$$?; rm -f src/cdynamo/_C*.so; \
	  PATH=$(abspath $(VENV))/bin:$$PATH cmake --build $(BUILD_DIR) -j2; exit $$rc

bench: build
	$(PYEXE) benchmarks/run.py

bench-quick: build
	$(PYEXE) benchmarks/run.py --quick

# pip install . into a fresh venv (with torch==2.13.0): builds the wheel with
# scikit-build-core from scratch (slow: the whole C++ build), then imports it outside the tree.
package-test: $(DEPS_STAMP)
	PYTHON_BOOT=$(PYTHON_BOOT) bash tools/package_test.sh

# PyTorch's own TorchDynamo tests (test_functions.py, test_modules.py from ../shared/peer)
# under cdynamo through the peer shim, against the strict list docs/conformance_failing.tsv;
# torch._dynamo's own run of each file is cached in build/conformance/. Not part of `make test`
# (several minutes). CONFORMANCE_ARGS: e.g. --only functions, --update, --rerun-baseline.
conformance: build
	$(PYEXE) -c 'import expecttest, pytest_timeout, hypothesis' 2>/dev/null || \
	  $(PYEXE) -m pip install -q --disable-pip-version-check $(TORCH_PIN) expecttest pytest-timeout hypothesis
	$(PYEXE) tools/conformance.py $(CONFORMANCE_ARGS)

# Each model in its own process; rewrites its sections of docs/models.md (see benchmarks/models.py).
models: build $(MODELS_STAMP)
	$(PYEXE) benchmarks/models.py
	$(PYEXE) benchmarks/models.py --train

models-train: build $(MODELS_STAMP)
	$(PYEXE) benchmarks/models.py --train

models-inductor: build $(MODELS_STAMP)
	$(PYEXE) benchmarks/models.py --inductor

clean:
	rm -rf $(BUILD_DIR) src/cdynamo/_C*.so
