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

.PHONY: all venv build demo test test-cpp test-py bench bench-quick conformance clean

all: build

$(DEPS_STAMP): requirements-dev.txt
	test -x $(PY) || $(PYTHON_BOOT) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check $(TORCH_PIN) -r requirements-dev.txt
	# Development install of the package: the source tree is on sys.path, the extension is
	# built in place into src/cdynamo/ by CMake.
	$(PY) -c "import sysconfig,os; open(os.path.join(sysconfig.get_paths()['purelib'],'cdynamo-dev.pth'),'w').write(os.path.abspath('src')+'\n')"
	touch $@

venv: $(DEPS_STAMP)

$(BUILD_DIR)/build.ninja: $(DEPS_STAMP) CMakeLists.txt
	PATH=$(abspath $(VENV))/bin:$$PATH cmake -S . -B $(BUILD_DIR) -G Ninja \
	  -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DPython_EXECUTABLE=$(abspath $(PY)) $(CMAKE_ARGS)

build: $(BUILD_DIR)/build.ninja
	PATH=$(abspath $(VENV))/bin:$$PATH cmake --build $(BUILD_DIR) -j2

demo: build
	$(PY) examples/demo.py

test-cpp: build
	cd $(BUILD_DIR) && PATH=$(abspath $(VENV))/bin:$$PATH ctest --output-on-failure

test-py: build
	$(PY) -m pytest -q tests

test: test-cpp test-py

bench: build
	$(PY) benchmarks/run.py

bench-quick: build
	$(PY) benchmarks/run.py --quick

# PyTorch's own TorchDynamo tests (test_functions.py, test_modules.py from ../shared/peer)
# under cdynamo through the peer shim, against the strict list docs/conformance_failing.tsv;
# torch._dynamo's own run of each file is cached in build/conformance/. Not part of `make test`
# (several minutes). CONFORMANCE_ARGS: e.g. --only functions, --update, --rerun-baseline.
conformance: build
	$(PY) -c 'import expecttest, pytest_timeout, hypothesis' 2>/dev/null || \
	  $(PY) -m pip install -q --disable-pip-version-check $(TORCH_PIN) expecttest pytest-timeout hypothesis
	$(PY) tools/conformance.py $(CONFORMANCE_ARGS)

clean:
	rm -rf $(BUILD_DIR) src/cdynamo/_C*.so
