"""Backend selection: explicit, by environment variable, automatic fallback with one warning when the
compiled kernel is missing, and the Ascend registration that the same call uses on an NPU."""
import json
import os
import re
import warnings

import numpy as np
import pytest
from conftest import random_tensor, to_float64
from reference import rotary_grad

import ms_rotary
from ms_rotary import backend as backend_module
from ms_rotary import library
from ms_rotary.kernels import AscendKernel, reg_info
from ms_rotary.modes import MODE_LAYOUTS

OP_DEF = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernel", "ascend", "op_host",
                      "ms_rotary_partial_rotary_mul.cpp")


def test_environment_variable_picks_the_backend(monkeypatch):
    monkeypatch.setenv(ms_rotary.BACKEND_ENV_VAR, "pyfunc")
    assert ms_rotary.InplacePartialRotaryMulGrad(0, [0, 8]).backend == "pyfunc"
    monkeypatch.setenv(ms_rotary.BACKEND_ENV_VAR, "aot")
    assert ms_rotary.InplacePartialRotaryMulGrad(0, [0, 8]).backend == "aot"
    monkeypatch.setenv(ms_rotary.BACKEND_ENV_VAR, "")  # empty means unset, as for MS_ROTARY_NUM_THREADS
    assert ms_rotary.InplacePartialRotaryMulGrad(0, [0, 8]).backend == "aot"
    monkeypatch.setenv(ms_rotary.BACKEND_ENV_VAR, "gpu")
    with pytest.raises(ValueError, match=r"\$MS_ROTARY_BACKEND='gpu' is not a backend"):
        ms_rotary.InplacePartialRotaryMulGrad(0, [0, 8])


def test_missing_compiled_kernel_falls_back_with_one_warning(monkeypatch):
    monkeypatch.setattr(library, "LIB_PATH", "/nonexistent/libms_rotary_cpu.so")
    monkeypatch.setattr(backend_module, "_warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ops = [ms_rotary.InplacePartialRotaryMulGrad(1, [0, 8]) for _ in range(3)]
    assert [w.category for w in caught] == [RuntimeWarning]
    assert "compiled CPU kernel not found" in str(caught[0].message)
    assert all(op.backend == "pyfunc" for op in ops)
    rng = np.random.default_rng(0)
    dy, dy64 = random_tensor(rng, (1, 2, 2, 8), "float32")
    cos, cos64 = random_tensor(rng, (1, 2, 1, 8), "float32")
    sin, sin64 = random_tensor(rng, (1, 2, 1, 8), "float32")
    ops[0](dy, cos, sin)
    np.testing.assert_allclose(to_float64(dy), rotary_grad(1, dy64, cos64, sin64, 0, 8), rtol=1e-5, atol=1e-5)


def test_an_ascend_device_selects_the_ascend_kernel():
    assert backend_module.choose_backend(None, "Ascend") == "ascend"
    assert backend_module.choose_backend("pyfunc", "Ascend") == "pyfunc"
    assert backend_module.choose_backend(None, "CPU") == "aot"


def test_ascend_registration_matches_the_op_definition():
    """Both op families: the ops on cos/sin tables, and their twins that gather cos/sin rows by position, whose
    OpDef adds what sits under `if (gathers)` (inputs positions and lane_masks, the positions_axes attribute)."""
    source = open(OP_DEF).read()
    inputs = re.findall(r'Input\("(\w+)"\)', source)
    outputs = re.findall(r'Output\("(\w+)"\)', source)
    attrs = re.findall(r'Attr\("(\w+)"\)', source)
    gathering = re.findall(r"if \(gathers\) (\{.*?\}|[^;]*;)", source, re.S)
    gather_only = {name for block in gathering for name in re.findall(r'(?:Input|Attr)\("(\w+)"\)', block)}
    assert gather_only == {"positions", "lane_masks", "positions_axes"}
    families = ((AscendKernel.OP_TYPES, None), (AscendKernel.GATHER_OP_TYPES, {"positions_axes": [0, 1]}))
    for op_types, positions in families:
        for op_name in op_types.values():
            assert f"OP_ADD({op_name})" in source
            info = reg_info(op_name, 3, [128, 192], "Ascend", "dy", positions=positions,
                            lane_masks=positions is not None)
            info = json.loads(info) if isinstance(info, str) else info
            keep = (lambda name: True) if positions else (lambda name: name not in gather_only)
            assert [i["name"] for i in info["inputs"]] == [name for name in inputs if keep(name)]
            assert [o["name"] for o in info["outputs"]] == outputs
            assert [a["name"] for a in info["attr"]] == [name for name in attrs if keep(name)]
            assert info["target"] == "Ascend"
            assert len(info["dtype_format"]) == 9


def test_ascend_op_types_are_ms_rotarys_own():
    """A custom OPP registering CANN's built-in op types (InplacePartialRotaryMul/Grad, with other attribute
    defaults) would shadow them for every user of the process."""
    source = open(OP_DEF).read()
    for op_type in (*AscendKernel.OP_TYPES.values(), *AscendKernel.GATHER_OP_TYPES.values()):
        assert op_type.startswith("MsRotary")
    assert "OP_ADD(InplacePartialRotaryMul" not in source


RULES_HEADER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernel", "common",
                            "rotary_rules.h")


def test_python_and_the_kernels_read_one_mode_table_and_one_set_of_dtype_ids():
    """The facts the C++ and Ascend kernels take from kernel/common/rotary_rules.h, stated for Python in
    ms_rotary.modes and ms_rotary.kernels.AscendKernel: a change to one side alone fails here."""
    with open(RULES_HEADER) as header:
        text = header.read()
    layout_ids = {name: int(value) for name, value in re.findall(r"k(Halves|Pairs|Quarters) = (\d)", text)}
    table = re.search(r"kModeLayouts\[4\] = \{(.*?)\};", text, re.S).group(1)
    rows = re.findall(r"\{k(\w+), k(\w+)\},\s*// (\d) ", table)
    assert {int(mode): (x.lower(), y.lower()) for x, y, mode in rows} == MODE_LAYOUTS
    assert set(layout_ids) == {"Halves", "Pairs", "Quarters"}
    dtypes = dict(re.findall(r"k(Float32|Float16|BFloat16) = (\d)", text))
    assert {name.lower(): int(value) for name, value in dtypes.items()} == AscendKernel.DTYPE_IDS
