"""Which kernel runs: the compiled C++ library shipped in the package, or the numpy fallback."""
import os
import warnings

from . import library

ENV_VAR = "MS_ROTARY_BACKEND"  # "aot" (default) or "pyfunc"
BACKENDS = ("aot", "pyfunc")

_warned = False


def choose_backend(requested=None, device_target="CPU"):
    """`requested` (or $MS_ROTARY_BACKEND, or "aot") -> the backend to use. "aot" means the compiled kernel
    of the device: "ascend" (kernel/ascend) on an Ascend device; on CPU it falls back to "pyfunc" with one
    warning when the compiled kernel is missing."""
    global _warned
    backend = requested if requested is not None else (os.environ.get(ENV_VAR) or "aot")  # "" means unset
    if backend not in BACKENDS:
        source = "backend" if requested is not None else f"${ENV_VAR}"
        raise ValueError(f"ms_rotary: {source}={backend!r} is not a backend; use one of {list(BACKENDS)}")
    if backend == "aot" and device_target == "Ascend":
        return "ascend"
    if backend == "aot" and library.compiled_kernel_path() is None:
        if not _warned:
            warnings.warn(f"ms_rotary: compiled CPU kernel not found at {library.LIB_PATH}; using the numpy fallback "
                          f"(slower). Reinstall with `pip install .` to build it.", RuntimeWarning, stacklevel=3)
            _warned = True
        return "pyfunc"
    return backend
