import os
import tempfile

import mindspore as ms
import numpy as np
import pytest
from mindspore.graph.api import _pynative_executor

# MindSpore writes rank_*/ and logs into the working directory: keep them out of the checkout.
os.chdir(tempfile.mkdtemp(prefix="ms_rotary_tests_"))

DTYPES = {"float32": ms.float32, "float16": ms.float16, "bfloat16": ms.bfloat16}
# atol = rtol per dy dtype, against float64 on the dtype-rounded inputs (SPEC: 1e-3, 1e-3, 1e-2).
TOLERANCE = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 4e-3}
BROADCASTS = ("BSND", "111D", "1SND", "B1ND", "BS1D", "11ND", "B11D", "1S1D")
BACKENDS = ("aot", "pyfunc")


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


def raw_bits(tensor):
    """The tensor's bytes, for bit-exact comparisons (bf16 included)."""
    if tensor.dtype == ms.bfloat16:
        return tensor.view(ms.int16).asnumpy().copy()
    return tensor.asnumpy().view(np.uint8).copy()


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
