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
from ms_rotary.call import CacheRead, RotaryCall
from ms_rotary.modes import MODE_LAYOUTS
from ms_rotary.targets import ascend
from ms_rotary.targets.ascend import AscendKernel

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
    """Each op family's registration against the OpDef: the ops on tables, their twins that gather cos/sin rows
    by position (inputs positions, lane_masks and attribute positions_axes, under `if (gathers)`), and those
    for q and k in one launch (q and k in and out instead of dy, under `if (with_k)`)."""
    source = open(OP_DEF).read()
    in_source = {kind: re.findall(rf'{kind}\("(\w+)"\)', source) for kind in ("Output", "Attr")}
    input_names = re.search(r"InputNames\(bool gathers, bool with_k\) \{(.*?)\n\}", source, re.S).group(1)
    in_source["Input"] = re.findall(r'"(\w+)"', input_names)  # DefineRotaryOp declares these, in this order
    tables = {"Input": ["dy", "cos", "sin"], "Output": ["dy"], "Attr": ["rotary_mode", "partial_slice"]}
    gathering = {"Input": ["dy", "cos", "sin", "positions", "lane_masks"], "Output": ["dy"],
                 "Attr": ["rotary_mode", "partial_slice", "positions_axes"]}
    qk = {"Input": ["q", "k", "cos", "sin", "positions", "lane_masks"], "Output": ["q", "k"],
          "Attr": gathering["Attr"]}
    table_call = RotaryCall(3, (128, 192), False, False)
    cache_call = RotaryCall(3, (128, 192), False, False, "q", CacheRead(192))
    qk_call = RotaryCall(3, (128, 192), False, False, "q", CacheRead(192, with_k=True))
    families = ((ascend.OP_TYPES, tables, table_call), (ascend.CACHE_READ_OP_TYPES, gathering, cache_call),
                (ascend.CACHE_READ_QK_OP_TYPES, qk, qk_call))
    for op_types, expected, call in families:
        for kind, names in expected.items():  # the OpDef declares them in this order
            assert [name for name in in_source[kind] if name in names] == names
        for conjugate, op_name in op_types.items():
            assert f"OP_ADD({op_name})" in source
            prim = AscendKernel(RotaryCall(**{**call.__dict__, "conjugate": conjugate}), "Ascend").prim
            info = prim.reg_info
            info = json.loads(info) if isinstance(info, str) else info
            assert [i["name"] for i in info["inputs"]] == expected["Input"]
            assert [o["name"] for o in info["outputs"]] == expected["Output"]
            assert [a["name"] for a in info["attr"]] == expected["Attr"]
            assert info["target"] == "Ascend"
            assert len(info["dtype_format"]) == 9
    gated = {name for block in re.findall(r"if \((?:gathers|with_k)\) (\{.*?\}|[^;]*;)", source, re.S)
             for name in re.findall(r'(?:Output|Attr)\("(\w+)"\)|^\s*names = \{([^}]*)\}|insert\([^{]*\{([^}]*)\}',
                                    block, re.M) for name in re.findall(r'"?(\w+)"?', " ".join(name))}
    assert gated == {"positions", "lane_masks", "positions_axes", "q", "k"}  # declared by some ops only


def test_ascend_op_types_are_ms_rotarys_own():
    """A custom OPP registering CANN's built-in op types (InplacePartialRotaryMul/Grad, with other attribute
    defaults) would shadow them for every user of the process."""
    source = open(OP_DEF).read()
    for op_type in (*ascend.OP_TYPES.values(), *ascend.CACHE_READ_OP_TYPES.values(),
                    *ascend.CACHE_READ_QK_OP_TYPES.values()):
        assert op_type.startswith("MsRotary")
    assert "OP_ADD(InplacePartialRotaryMul" not in source


RULES_HEADER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernel", "common",
                            "rotary_rules.h")


def test_python_and_the_kernels_read_one_mode_table_and_one_set_of_dtype_ids():
    """The facts the C++ and Ascend kernels take from kernel/common/rotary_rules.h, stated for Python in
    ms_rotary.modes and ms_rotary.targets.ascend: a change to one side alone fails here."""
    with open(RULES_HEADER) as header:
        text = header.read()
    layout_ids = {name: int(value) for name, value in re.findall(r"k(Halves|Pairs|Quarters) = (\d)", text)}
    table = re.search(r"kModeLayouts\[4\] = \{(.*?)\};", text, re.S).group(1)
    rows = re.findall(r"\{k(\w+), k(\w+)\},\s*// (\d) ", table)
    assert {int(mode): (x.lower(), y.lower()) for x, y, mode in rows} == MODE_LAYOUTS
    assert set(layout_ids) == {"Halves", "Pairs", "Quarters"}
    dtypes = dict(re.findall(r"k(Float32|Float16|BFloat16) = (\d)", text))
    assert {name.lower(): int(value) for name, value in dtypes.items()} == ascend.DTYPE_IDS
