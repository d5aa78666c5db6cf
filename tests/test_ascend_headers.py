"""The Ascend sources against the real AscendC (asc-devkit) and CANN register (metadef) headers.

The type-check runs when MS_ROTARY_ASC_DEVKIT (and, for the op_host sources, MS_ROTARY_METADEF) name
checkouts of github.com/cannmirror/asc-devkit and github.com/Ascend/metadef; kernel/ascend/README.md gives
the commits and the commands. The tiling-field test needs nothing.
"""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ASCEND = os.path.join(ROOT, "kernel", "ascend")
sys.path.insert(0, ASCEND)
import check_headers  # noqa: E402


def x_macro_fields():
    with open(os.path.join(ROOT, "kernel", "common", "rotary_rules.h")) as f:
        text = f.read()
    body = re.search(r"#define MS_ROTARY_TILING_FIELDS\(X\)(.*?)\n\n", text, re.S).group(1)
    return re.findall(r"X\(\w+, (\w+)\)", body)


def test_tiling_header_lists_the_rules_fields_one_per_line():
    # CANN's kernel build reads the TilingData fields line by line; the kernel reads them through
    # MS_ROTARY_TILING_FIELDS. A field added to one list only would be missing from the kernel's struct.
    with open(check_headers.OP_TILING_HEADER) as f:
        structs = check_headers.tiling_structs(f.read())
    assert [name for name, _ in structs] == ["PartialRotaryTilingData"]
    fields = structs[0][1]
    assert [field for _, field in fields] == x_macro_fields()
    assert {dtype for dtype, _ in fields} == {"int64_t"}


def test_shim_structs_are_read_field_by_field():
    with open(check_headers.SHIM) as f:
        structs = check_headers.shim_structs(f.read())
    assert structs["DataCopyPadExtParams"] == [("bool", "isPad"), ("uint8_t", "leftPadding"),
                                               ("uint8_t", "rightPadding"), ("float", "paddingValue")]
    assert [field for _, field in structs["DataCopyExtParams"]] == ["blockCount", "blockLen", "srcStride",
                                                                      "dstStride", "rsv"]
    assert len(structs["BinaryRepeatParams"]) == 6


def test_shim_functions_are_the_free_api_calls():
    functions = check_headers.shim_functions(check_headers.preprocessed_shim())
    names = [name for name, _, _ in functions]
    assert {"Gather", "Cast", "Adds", "Mins", "CreateVecIndex", "PipeBarrier"} <= set(names)
    assert names.count("DataCopyPad") == 2 and names.count("Mul") == 2  # both directions; count and repeat forms
    assert "FreeTensor" not in names and "EnQue" not in names  # class members are the kernel's calls to check
    gather = dict((name, types) for name, _, types in functions)["Gather"]
    assert gather == ["const LocalTensor<T> &", "const LocalTensor<T> &", "const LocalTensor<uint32_t> &", "uint32_t",
                      "uint32_t"]


def test_register_api_is_read_in_its_namespace_and_probed_for_3510_only():
    preprocessed = check_headers.preprocessed_shim()
    names = {name for name, _, _ in check_headers.shim_functions(preprocessed)}
    assert {"Reg::LoadAlign", "Reg::StoreAlign", "Reg::Cast", "Reg::UpdateMask", "Reg::DeInterleave"} <= names
    with open(check_headers.SHIM) as f:
        enums = check_headers.shim_enums(f.read())
    assert enums["AscendC::Reg::LoadDist"] == ["DIST_NORM", "DIST_UNPACK_B16"]
    assert "UNKNOWN" in enums["AscendC::RoundMode"]  # an enumerator's value is not part of its name
    probes = check_headers.function_probes(preprocessed, "3510")
    assert any("AscendC::Reg::UpdateMask<float>(std::declval<uint32_t &>())" in line for line in probes)
    assert not any("Reg::" in line for line in check_headers.function_probes(preprocessed, "2201"))


def test_tiling_reader_sees_only_whole_field_lines():
    header = "BEGIN_TILING_DATA_DEF(T)\nTILING_DATA_FIELD_DEF(int64_t, a);\nFIELDS(X)\nEND_TILING_DATA_DEF;\n"
    assert check_headers.tiling_structs(header) == [("T", [("int64_t", "a")])]


ASC_DEVKIT = os.environ.get("MS_ROTARY_ASC_DEVKIT")
METADEF = os.environ.get("MS_ROTARY_METADEF")


@pytest.mark.skipif(not ASC_DEVKIT, reason="MS_ROTARY_ASC_DEVKIT does not name an asc-devkit checkout")
def test_every_translation_unit_type_checks_against_the_real_headers():
    command = [sys.executable, os.path.join(ASCEND, "check_headers.py"), "--asc-devkit", ASC_DEVKIT]
    if METADEF:
        command += ["--metadef", METADEF]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    units = (len(check_headers.KERNEL_UNITS) + 1) * len(check_headers.ARCHES)  # + the shim's conformance
    units += len(check_headers.HOST_UNITS) if METADEF else 0
    assert f"headers: {units}/{units} translation units type-check" in result.stdout
