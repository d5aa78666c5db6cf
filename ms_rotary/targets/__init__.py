"""The targets a RotaryCall runs on, one module each; each owns its primitives (traced) and its eager calls,
for tables and for cache reads:

  cpu      kernel/cpu through ops.Custom(func_type="aot"); eagerly through its C entries on the tensors' memory
  numpy    numpy_kernel through ops.Custom(func_type="pyfunc"); eagerly on the tensors' memory
  ascend   kernel/ascend through ops.Custom(func_type="aot", target Ascend), on clones it writes"""
from .ascend import AscendKernel
from .cpu import CpuKernel
from .numpy import NumpyKernel

KERNELS = {"aot": CpuKernel, "pyfunc": NumpyKernel, "ascend": AscendKernel}  # by backend (backend.py)
