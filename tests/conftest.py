import gc
import itertools
import os
import shutil
import tempfile

import builds
import mindspore as ms
import numpy as np
import pytest
from mindspore import nn
from mindspore.graph.api import _pynative_executor

# One temporary directory per run holds everything a run writes (pytest's tmp_path, the C++ builds, the
# working directory MindSpore writes rank_*/ and logs into); the process that started the run removes it.
# Workers (pytest-xdist) find it in the environment they inherit.
TEST_ROOT_ENV = "MS_ROTARY_TEST_ROOT"
WORKERS_ENV = "MS_ROTARY_TEST_WORKERS"


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """With pytest-xdist installed, a run of more than named cases spreads over min(4, CPUs) workers
    (MS_ROTARY_TEST_WORKERS=N sets N; 0 or -n 0 runs in this process): most tests wait on MindSpore's graph
    compiler, subprocesses or C++ builds, so two workers on two cores finish in about two thirds of the time.
    Work stealing: a worker that runs dry takes half of another's queue (xdist's `load` left one worker alone
    with a minute of queued tests here)."""
    if not config.pluginmanager.hasplugin("xdist") or config.option.numprocesses is not None:
        return
    if hasattr(config, "workerinput") or config.option.usepdb or _named_on_the_command_line(config):
        return
    workers = int(os.environ.get(WORKERS_ENV, min(4, os.cpu_count() or 1)))
    if workers > 1:
        config.option.numprocesses = workers
        if config.option.dist == "no":
            config.option.dist = "worksteal"


def pytest_configure(config):
    if TEST_ROOT_ENV not in os.environ:  # the process that started the run
        config._ms_rotary_test_root = os.environ[TEST_ROOT_ENV] = tempfile.mkdtemp(prefix="ms_rotary_tests_")
    if not config.option.basetemp and not hasattr(config, "workerinput"):
        config.option.basetemp = os.path.join(os.environ[TEST_ROOT_ENV], "tmp_path")


def pytest_unconfigure(config):
    root = getattr(config, "_ms_rotary_test_root", None)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)
        del os.environ[TEST_ROOT_ENV]


@pytest.fixture(scope="session", autouse=True)
def _work_directory():
    """Tests run in a directory of their own under the run's root (not at import: xdist starts its workers
    in the directory the run started in)."""
    start = os.getcwd()
    work = tempfile.mkdtemp(prefix="work_", dir=os.environ[TEST_ROOT_ENV])
    os.chdir(work)
    yield
    os.chdir(start)


def _named_on_the_command_line(config):
    """Node ids given as arguments (path::name...), relative to the root as item.nodeid is."""
    named = []
    for arg in config.args:
        path, separator, rest = arg.partition("::")
        if separator:
            absolute = os.path.join(str(config.invocation_params.dir), path)
            named.append(os.path.relpath(absolute, str(config.rootpath)) + "::" + rest)
    return named


def _deselect_slow_unless_asked(config, items):
    """Without -m, slow cases run only when named (pytest tests/x.py::test_y[case])."""
    if config.option.markexpr:
        return
    named = _named_on_the_command_line(config)
    kept, deselected = [], []
    for item in items:
        slow = item.get_closest_marker("slow") is not None
        asked = any(item.nodeid == node or item.nodeid.startswith(node + "[") for node in named)
        (deselected if slow and not asked else kept).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


# Each runs programs of its own for up to a minute (msrun's job, the examples): first, so no worker is left
# with one of them at the end.
LONG_MODULES = {"test_data_parallel", "test_examples"}


def pytest_collection_modifyitems(session, config, items):
    """Slow cases deselected unless asked for. The C++ programs the selected tests use start building now, one
    at a time on one core, and the tests that wait for them run last, after the Python tests have used the
    other core meanwhile; the long modules run first."""
    _deselect_slow_unless_asked(config, items)
    modules = {item.module.__name__ for item in items}
    builds.start(modules & builds.USED_BY)
    # stable: order kept within each part
    items.sort(key=lambda item: (item.module.__name__ in builds.USED_BY, item.module.__name__ not in LONG_MODULES))


def pytest_sessionfinish(session, exitstatus):
    builds.clean_up()

DTYPES = {"float32": ms.float32, "float16": ms.float16, "bfloat16": ms.bfloat16}
# atol = rtol per dy dtype, against float64 on the dtype-rounded inputs (CANN's upstream tests use 1e-3, 1e-3, 1e-2).
TOLERANCE = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 4e-3}
BROADCASTS = ("BSND", "111D", "1SND", "B1ND", "BS1D", "11ND", "B11D", "1S1D")
BACKENDS = ("aot", "pyfunc")
OPS = {"InplacePartialRotaryMul": True, "PartialRotaryMul": False, "InplacePartialRotaryMulGrad": True}  # in place?


class Spread(tuple):
    """An axis value that fills several test arguments (cycled_cases)."""


def pairs(first, second):
    """Every (a, b) of two axes, each filling two test arguments."""
    return [Spread(pair) for pair in itertools.product(first, second)]


def cycled_cases(main_axes, cycled_axes):
    """pytest params: every combination of `main_axes` (lists of values; a Spread value fills several
    arguments), each with one value per cycled axis, the values cycling (offset per axis) so each appears; the
    rest of the full product is marked slow (`pytest -m slow` runs it)."""
    for i, main in enumerate(itertools.product(*main_axes)):
        for cycled in itertools.product(*(list(enumerate(axis)) for axis in cycled_axes)):
            chosen = all(index == (i + k) % len(cycled_axes[k]) for k, (index, _) in enumerate(cycled))
            values = [v for part in (*main, *(value for _, value in cycled))
                      for v in (part if isinstance(part, Spread) else (part,))]
            yield pytest.param(*values, marks=() if chosen else (pytest.mark.slow,))


def apply_rotary_op(op_name, mode, partial_slice, t, cos, sin, transpose=False):
    """The op's linear map of its first input (R for the forward ops, R^T for the grad op), or its transpose,
    in float64 (tests/reference.py)."""
    from reference import rotary_forward, rotary_grad

    backward = (op_name == "InplacePartialRotaryMulGrad") != transpose
    return (rotary_grad if backward else rotary_forward)(mode, t, cos, sin, *partial_slice)


def cos_shape(dy_shape, pattern, length):
    return tuple(dim if letter != "1" else 1 for dim, letter in zip(dy_shape[:3], pattern[:3])) + (length,)


def random_tensor(rng, shape, dtype_name, low=-1.0, high=1.0):
    """A MindSpore tensor of `dtype_name` and the float64 copy of its exact (rounded) values.
    Every lane draws its own value, so paired lanes of cos/sin differ."""
    tensor = ms.Tensor(rng.uniform(low, high, shape).astype(np.float32), DTYPES[dtype_name])
    return tensor, to_float64(tensor)


def to_float64(tensor):
    return tensor.float().asnumpy().astype(np.float64) if tensor.dtype == ms.bfloat16 else \
        tensor.asnumpy().astype(np.float64)


class NormLayerCell(nn.Cell):
    """A user's Cell around a head-norm layer's call: its construct is what a graph compiles."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def construct(self, q, k, positions, q_weight, k_weight):
        return self.layer(q, k, positions, q_weight, k_weight)


def raw_bits(tensor):
    """The tensor's bytes, for bit-exact comparisons (bf16 included)."""
    if tensor.dtype == ms.bfloat16:
        return tensor.view(ms.int16).asnumpy().copy()
    return tensor.asnumpy().view(np.uint8).copy()


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap():
    """MindSpore calls gc.collect() on every graph compile; over the heap of a worker that has imported
    MindSpore, numpy, hypothesis (and torch, transformers) each took 0.1-0.5 s, 115 of 700 worker-seconds of a
    run. Collected once, what each module starts with is frozen out of later collections (garbage made after
    is still collected)."""
    gc.collect()
    gc.freeze()
    yield


@pytest.fixture(autouse=True)
def pynative_autograd_reset():
    """MindSpore 2.10 leaves PyNative autograd recording for good when anything raises inside ms.grad's forward
    (tests that expect an error do that): later first-order backwards then run as if nested. Reset it."""
    yield
    if _pynative_executor.grad_flag():
        _pynative_executor.clear_res()


@pytest.fixture(params=["pynative", "graph"])
def exec_mode(request):
    """Runs the test in PyNative and in GRAPH_MODE, restoring PyNative after."""
    ms.set_context(mode=ms.GRAPH_MODE if request.param == "graph" else ms.PYNATIVE_MODE)
    yield request.param
    ms.set_context(mode=ms.PYNATIVE_MODE)


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def kernel_bits(values, dtype):
    """Random float32 values as the raw bits of `dtype` (bf16: the top half of the fp32 bits)."""
    if dtype == "float32":
        return values.astype(np.float32).view(np.uint32).copy()
    if dtype == "float16":
        return values.astype(np.float16).view(np.uint16).copy()
    return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def kernel_float32(bits, dtype):
    """kernel_bits' raw bits as float32 values, as the kernel reads them (numpy_kernel.to_float32)."""
    from ms_rotary import numpy_kernel
    views = {"float32": np.float32, "float16": np.float16}
    return numpy_kernel.to_float32(bits.view(views[dtype]) if dtype in views else bits, dtype)


def run_kernel(kernel, dy, cos, sin, dtypes, mode, start, end, conjugate, out=None):
    """One call of library.CompiledKernel `kernel` on numpy arrays of kernel_bits, on one thread."""
    dy_dtype, cos_dtype = dtypes
    status = kernel.rotate(dy.ctypes.data, None if out is None else out.ctypes.data, cos.ctypes.data, sin.ctypes.data,
                           dy.shape, cos.shape, sin.shape, dy_dtype, cos_dtype, cos_dtype, mode, start, end, conjugate,
                           num_threads=1)
    assert status == 0
