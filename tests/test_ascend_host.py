"""The Ascend kernel sources, checked on the host: the tiling's unit tests, and both kernels (the memory-based
one, and the 950's register-based one) compiled with g++ against ms_rotary's shim of the AscendC APIs they use
(kernel/ascend/host_shim), run block by block under AddressSanitizer/UBSan on random inputs, against the
float64 reference and bit for bit against the numpy kernel (so the CPU kernel), every mode, direction and
dtype pair. What only an NPU can confirm (the real APIs' semantics and timing, the CANN build) is in the
README."""
import itertools
import json
import subprocess

import builds
import numpy as np
import pytest
from conftest import BROADCASTS, TOLERANCE, cos_shape
from reference import rotary_forward, rotary_grad

from benchmarks.ascend_model import CHIPS, runner_input
from ms_rotary import numpy_kernel
from ms_rotary.tables import mrope_lane_channels
from ms_rotary.targets.ascend import DTYPE_IDS, lane_masks

UB_BYTES = 192 * 1024
KERNEL_TYPE_AIV_ONLY = 0  # asc-devkit's KernelMetaType

pytestmark = pytest.mark.skipif(not builds.HAVE_COMPILER, reason="needs g++ to build the host programs")


@pytest.fixture(scope="module")
def kernel_runner():
    return builds.built("ascend kernel runner")


def test_tiling_host_unit_tests():
    result = subprocess.run([builds.built("ascend tiling tests")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "tiling host tests passed" in result.stdout


def _to_bits(values, dtype):
    """float32 values -> (bytes of the dtype, the exact float64 values those bytes hold)."""
    if dtype == "float32":
        return values.astype(np.float32).tobytes(), values.astype(np.float32).astype(np.float64)
    if dtype == "float16":
        rounded = values.astype(np.float16)
        return rounded.tobytes(), rounded.astype(np.float64)
    bits = values.astype(np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
    return rounded.tobytes(), (rounded.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _from_bits(raw, dtype, shape):
    if dtype == "float32":
        return np.frombuffer(raw, np.float32).reshape(shape).astype(np.float64)
    if dtype == "float16":
        return np.frombuffer(raw, np.float16).reshape(shape).astype(np.float64)
    bits = np.frombuffer(raw, np.uint16).astype(np.uint32) << 16
    return bits.view(np.float32).reshape(shape).astype(np.float64)




def gathered(cache, positions, axes, lane_channels):
    """The cos/sin table a call that gathers by position reads: lane l of token (b, s) from the cache [1, P, 1, L]
    row at positions[lane_channels[l], b, s] (positions [channels, 1|B, S]), shaped to broadcast over dy in the
    layout whose (B, S) axes are `axes`."""
    rows = cache[0, :, 0][positions]  # [channels, 1|B, S, L]
    table = np.take_along_axis(rows, np.asarray(lane_channels).reshape(1, 1, 1, -1), 0)[0]  # [1|B, S, L]
    return {(0, 1): table[:, :, None], (1, 0): table.transpose(1, 0, 2)[:, :, None], (0, 2): table[:, None]}[axes]


def run_on_host(runner, tmp_path, conjugate, mode, dy_dtype, cos_dtype, dy_shape, cos_shape_, start, end,
                cores=8, ub_bytes=UB_BYTES, seed=0, arch=2201, positions=None, axes=(0, 1), lane_channels=None,
                k_heads=0):
    """One launch on the host, checked. With `positions` (int [1|B, S], or [channels, 1|B, S] with the channel
    of each cos lane in lane_channels): the ops that gather cos/sin rows by position, cos_shape_ the cache
    [1, P, 1, L], axes dy's (B, S) axes; with k_heads too: the q+k ops, k dy's shape with k_heads heads."""
    rng = np.random.default_rng(seed)
    shapes = [tuple(dy_shape)]
    if k_heads:
        heads_axis = 3 - sum(axes)
        shapes.append(tuple(k_heads if i == heads_axis else n for i, n in enumerate(dy_shape)))
    tensors = [_to_bits(rng.uniform(-1, 1, shape).astype(np.float32), dy_dtype) for shape in shapes]
    cos_raw, cos64 = _to_bits(rng.uniform(-1, 1, cos_shape_).astype(np.float32), cos_dtype)
    sin_raw, sin64 = _to_bits(rng.uniform(-1, 1, cos_shape_).astype(np.float32), cos_dtype)
    gather, gather_raw = {}, b""
    if positions is not None:
        positions = np.asarray(positions).reshape(-1, *np.shape(positions)[-2:])  # [channels, 1|B, S]
        lane_channels = np.zeros(end - start, np.int64) if lane_channels is None else np.asarray(lane_channels)
        gather = dict(channels=len(positions), positions_batch=positions.shape[1], batch_axis=axes[0],
                      seq_axis=axes[1], k_heads=k_heads)
        masks = lane_masks(lane_channels, len(positions), end - start, cos_dtype)
        gather_raw = np.ascontiguousarray(positions, np.int64).tobytes() + masks.tobytes()
    source, target, counts = tmp_path / "in.bin", tmp_path / "out.bin", tmp_path / "counts.json"
    source.write_bytes(runner_input(b"".join(raw for raw, _ in tensors) + cos_raw + sin_raw + gather_raw,
                                    conjugate=conjugate, mode=mode, dy_dtype=DTYPE_IDS[dy_dtype],
                                    cos_dtype=DTYPE_IDS[cos_dtype], dy=dy_shape, cos=cos_shape_, start=start, end=end,
                                    cores=cores, ub_bytes=ub_bytes, npu_arch=arch, **gather))
    if positions is not None:  # what the kernel reads, in range (the kernel clamps the others)
        rows = np.clip(positions, 0, cos_shape_[1] - 1)
        cos64, sin64 = gathered(cos64, rows, axes, lane_channels), gathered(sin64, rows, axes, lane_channels)
    result = subprocess.run([runner, str(source), str(target), str(counts)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    raw_out = target.read_bytes()
    for (raw_in, t64), shape in zip(tensors, shapes):  # dy (q), then k
        got = _from_bits(raw_out[:len(raw_in)], dy_dtype, shape)
        raw_out = raw_out[len(raw_in):]
        reference = rotary_grad if conjugate else rotary_forward
        tol = TOLERANCE[dy_dtype]
        np.testing.assert_allclose(got, reference(mode, t64, cos64, sin64, start, end), rtol=tol, atol=tol)
        if start == end:
            continue  # empty work: as it was, checked above
        # Bit for bit what the numpy kernel (and so the CPU kernel) computes: the same fp32 products and sums.
        same = numpy_kernel.rotate(t64.astype(np.float32), cos64.astype(np.float32), sin64.astype(np.float32),
                                   mode, start, end, conjugate)
        np.testing.assert_array_equal(got, _from_bits(_to_bits(same, dy_dtype)[0], dy_dtype, shape))
        np.testing.assert_array_equal(got[..., :start], t64[..., :start])
        np.testing.assert_array_equal(got[..., end:], t64[..., end:])
    assert raw_out == b""
    return json.loads(counts.read_text())


def register_path_ran(counts):
    """Whether the launch ran the 950's register-based kernel (its register instructions), and only it."""
    kinds = {kind for core in counts["cores"] for kind in core["vector"]}
    register = {kind for kind in kinds if kind.startswith("Reg::") or kind == "VF"}
    assert not register or register == kinds, kinds  # never both kernels in one launch
    return bool(register)


@pytest.mark.parametrize("conjugate", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("dy_dtype,cos_dtype", list(itertools.product(DTYPE_IDS, DTYPE_IDS)))
@pytest.mark.parametrize("mode", range(4))
def test_kernel_every_mode_and_dtype(kernel_runner, tmp_path, mode, dy_dtype, cos_dtype, conjugate):
    dy_shape = (2, 3, 2, 24)
    pattern = BROADCASTS[(mode * 9 + DTYPE_IDS[dy_dtype] * 3 + DTYPE_IDS[cos_dtype]) % len(BROADCASTS)]
    run_on_host(kernel_runner, tmp_path, conjugate, mode, dy_dtype, cos_dtype, dy_shape,
                cos_shape(dy_shape, pattern, 16), 4, 20, seed=mode)


# The Ascend 950 (npu_arch 3510): slices whose segments hold 16, 32 or a multiple of 64 pairs take the
# register-based kernel (op_kernel/rotary_kernel_arch35.h), the others the memory-based one.
@pytest.mark.parametrize("conjugate", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("dy_dtype,cos_dtype", list(itertools.product(DTYPE_IDS, DTYPE_IDS)))
@pytest.mark.parametrize("mode", range(4))
def test_950_register_kernel_every_mode_and_dtype(kernel_runner, tmp_path, mode, dy_dtype, cos_dtype, conjugate):
    dy_shape = (2, 3, 2, 80)  # slice [8, 72): 32 pairs per segment, 16 for quarters
    pattern = BROADCASTS[(mode * 9 + DTYPE_IDS[dy_dtype] * 3 + DTYPE_IDS[cos_dtype]) % len(BROADCASTS)]
    counts = run_on_host(kernel_runner, tmp_path, conjugate, mode, dy_dtype, cos_dtype, dy_shape,
                         cos_shape(dy_shape, pattern, 64), 8, 72, cores=3, seed=mode, arch=3510)
    assert register_path_ran(counts)


ARCH35_CASES = {  # name: (mode, dy dtype, cos dtype, dy shape, cos shape, start, end, cores, UB bytes)
    "64 pairs a segment, heads share cos": (0, "bfloat16", "float32", (2, 5, 4, 136), (1, 5, 1, 128), 8, 136, 3,
                                            UB_BYTES),
    "two registers a row, cos per row": (0, "float32", "float16", (1, 3, 2, 256), (1, 3, 2, 256), 0, 256, 2,
                                         UB_BYTES),
    "quarters, 64 pairs a segment, batch shares cos": (2, "float16", "bfloat16", (3, 4, 2, 256), (3, 1, 1, 256), 0,
                                                       256, 4, UB_BYTES),
    "interleaved, 128 pairs, one cos row for all": (1, "bfloat16", "bfloat16", (2, 3, 3, 288), (1, 1, 1, 256), 32,
                                                    288, 5, UB_BYTES),
    "16 pairs, odd rows per run, registers span runs": (3, "float32", "float32", (3, 7, 3, 48), (1, 7, 1, 32), 16,
                                                       48, 4, UB_BYTES),
    "one head: a cos row per row": (1, "float16", "float32", (2, 9, 1, 64), (1, 9, 1, 64), 0, 64, 3, UB_BYTES),
    "many blocks per core": (3, "bfloat16", "float32", (2, 64, 4, 192), (1, 64, 1, 64), 128, 192, 2, 12 * 1024),
    "950: 72 cores, 248 KB": (3, "bfloat16", "bfloat16", (2, 40, 4, 192), (1, 40, 1, 64), 128, 192,
                              CHIPS["950"].vector_cores, CHIPS["950"].ub_bytes),
}


@pytest.mark.parametrize("conjugate", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("name", ARCH35_CASES)
def test_950_register_kernel_shapes(kernel_runner, tmp_path, name, conjugate):
    mode, dy_dtype, cos_dtype, dy_shape, cos_shape_, start, end, cores, ub_bytes = ARCH35_CASES[name]
    counts = run_on_host(kernel_runner, tmp_path, conjugate, mode, dy_dtype, cos_dtype, dy_shape, cos_shape_, start,
                         end, cores, ub_bytes, seed=len(name), arch=3510)
    assert register_path_ran(counts)


@pytest.mark.parametrize("mode,start,end", [(0, 4, 28), (1, 0, 40), (2, 0, 96)], ids=["12 pairs", "20", "24"])
def test_950_other_slices_take_the_memory_kernel(kernel_runner, tmp_path, mode, start, end):
    dy_shape = (2, 3, 2, 96)
    counts = run_on_host(kernel_runner, tmp_path, True, mode, "bfloat16", "float32", dy_shape,
                         (1, 3, 1, end - start), start, end, cores=3, arch=3510)
    assert not register_path_ran(counts)


def test_950_register_kernel_counts(kernel_runner, tmp_path):
    """Guards the register path's design (benchmarks/ascend_model.py): one copy per region and block, only the
    slice's bytes; one VF call per run of rows sharing a cos row (plus one repeating the cos rows); per 64
    pairs (two rows here) two loads and two casts in, six products and sums, two casts and stores out."""
    dy_shape, cos_shape_, start, end, cores = (2, 8, 8, 96), (1, 8, 1, 64), 16, 80, 2
    counts = run_on_host(kernel_runner, tmp_path, False, 0, "bfloat16", "bfloat16", dy_shape, cos_shape_, start,
                         end, cores, UB_BYTES, arch=3510)
    rows_per_core = dy_shape[0] * dy_shape[1] * dy_shape[2] // cores
    assert counts["rows_per_loop"] == rows_per_core
    runs = rows_per_core // dy_shape[2]
    for core in counts["cores"]:
        assert core["queue_buffers"] == 2 and core["flag_waits"] == 0 and core["scalar_writes"] == 0
        assert core["kernel_type"] == KERNEL_TYPE_AIV_ONLY
        slice_bytes = rows_per_core * (end - start) * 2
        assert core["mte2"][0] == 2 + 4 and core["mte2"][2] == slice_bytes + 2 * runs * 64 * 2  # dy; cos, sin
        assert core["mte3"] == [2, 2 * rows_per_core, slice_bytes]
        vector = {kind: v[0] for kind, v in core["vector"].items()}
        assert vector["VF"] == runs + 1
        registers = rows_per_core // 2
        assert vector["Reg::Mul"] == 4 * registers and vector["Reg::Add"] == vector["Reg::Sub"] == registers
        assert vector["Reg::Cast"] == 4 * registers + 4 * runs  # in and out; cos and sin once per run
        assert "Reg::DeInterleave" not in vector and "Reg::Interleave" not in vector  # halves: no shuffles


EDGE_CASES = {  # name: (mode, dy dtype, dy shape, cos shape, start, end, cores, unified buffer bytes)
    "slice not 32-byte aligned": (0, "float16", (2, 3, 2, 16), (1, 3, 1, 6), 3, 9, 4, UB_BYTES),
    "head dim 1024": (2, "bfloat16", (1, 3, 2, 1024), (1, 3, 1, 1024), 0, 1024, 4, UB_BYTES),
    "one row": (3, "float32", (1, 1, 1, 192), (1, 1, 1, 64), 128, 192, 40, UB_BYTES),
    "more cores than rows": (1, "float32", (1, 3, 2, 32), (1, 3, 2, 32), 0, 32, 48, UB_BYTES),
    "many loops per core": (1, "bfloat16", (2, 64, 4, 128), (2, 64, 1, 64), 64, 128, 2, 8192),
    "empty slice": (0, "float32", (2, 3, 2, 16), (1, 3, 1, 4), 8, 8, 4, UB_BYTES),
    "every broadcast axis": (3, "float16", (2, 5, 3, 40), (2, 5, 3, 8), 32, 40, 7, UB_BYTES),
    "950: 72 cores, 248 KB": (3, "bfloat16", (2, 40, 4, 192), (1, 40, 1, 64), 128, 192, CHIPS["950"].vector_cores,
                              CHIPS["950"].ub_bytes),
}


@pytest.mark.parametrize("conjugate", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("name", EDGE_CASES)
def test_kernel_edge_shapes(kernel_runner, tmp_path, name, conjugate):
    mode, dtype, dy_shape, cos_shape_, start, end, cores, ub_bytes = EDGE_CASES[name]
    run_on_host(kernel_runner, tmp_path, conjugate, mode, dtype, "float32", dy_shape, cos_shape_, start, end,
                cores, ub_bytes, seed=len(name))


# Blocks of many rows (few cores): the paths where one cos row serves several rows of a block.
BLOCK_CASES = {  # name: (dy dtype, cos dtype, dy shape, cos shape, start, end, cores, unified buffer bytes)
    "blocks start mid-group, cos shared by heads": ("float32", "float32", (2, 5, 4, 40), (1, 5, 1, 16), 8, 24, 3,
                                                    UB_BYTES),
    "several blocks per core, crossing groups": ("bfloat16", "float32", (2, 8, 4, 32), (2, 8, 1, 32), 0, 32, 2,
                                                 16 * 1024),
    "one cos row for more than 255 rows": ("float16", "bfloat16", (1, 300, 2, 16), (1, 1, 1, 16), 0, 16, 1,
                                           UB_BYTES),
    "a cos row per head, shared over positions": ("bfloat16", "float16", (2, 5, 4, 40), (1, 1, 4, 16), 8, 24, 3,
                                                  UB_BYTES),
    "cos shared by a batch, slice over 64 lanes": ("float32", "bfloat16", (3, 4, 2, 160), (3, 1, 1, 144), 16, 160,
                                                   4, UB_BYTES),
}


@pytest.mark.parametrize("conjugate", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("mode", range(4))
@pytest.mark.parametrize("name", BLOCK_CASES)
def test_kernel_blocks_of_many_rows(kernel_runner, tmp_path, name, mode, conjugate):
    dy_dtype, cos_dtype, dy_shape, cos_shape_, start, end, cores, ub_bytes = BLOCK_CASES[name]
    run_on_host(kernel_runner, tmp_path, conjugate, mode, dy_dtype, cos_dtype, dy_shape, cos_shape_, start, end,
                cores, ub_bytes, seed=mode)


@pytest.mark.parametrize("mode", range(4))
def test_counts_show_blocks_overlap_and_only_slice_bytes(kernel_runner, tmp_path, mode):
    """Guards the throughput design (benchmarks/ascend_model.py): instructions per block, not per row; cos
    rows shared by the heads read once; two buffers per queue with no explicit flag waits; no per-lane
    scalar writes; only the slice's bytes copied."""
    dy_shape, cos_shape_, start, end, cores = (2, 8, 8, 96), (1, 8, 1, 64), 16, 80, 2
    run_on_host(kernel_runner, tmp_path, False, mode, "bfloat16", "float32", dy_shape, cos_shape_, start, end,
                cores, UB_BYTES)  # right, first
    (tmp_path / "in.bin").write_bytes(runner_input(conjugate=0, mode=mode, dy_dtype=2, cos_dtype=0, dy=dy_shape,
                                                   cos=cos_shape_, start=start, end=end, cores=cores,
                                                   ub_bytes=UB_BYTES, npu_arch=2201))  # zeros
    subprocess.run([kernel_runner, str(tmp_path / "in.bin"), str(tmp_path / "out.bin"), str(tmp_path / "c.json")],
                   check=True)
    counts = json.loads((tmp_path / "c.json").read_text())
    rows_per_core = dy_shape[0] * dy_shape[1] * dy_shape[2] // cores
    assert counts["rows_per_loop"] == rows_per_core  # one block per core here
    for core in counts["cores"]:
        assert core["queue_buffers"] == 2 and core["flag_waits"] == 0 and core["scalar_writes"] == 0
        assert core["kernel_type"] == KERNEL_TYPE_AIV_ONLY  # no cube cores started
        slice_bytes = rows_per_core * (end - start) * 2
        cos_rows = rows_per_core // dy_shape[2]
        assert core["mte2"] == [3, rows_per_core + 2 * cos_rows, slice_bytes + 2 * cos_rows * 64 * 4]
        assert core["mte3"] == [1, rows_per_core, slice_bytes]
        instructions = sum(v[0] for v in core["vector"].values())
        assert instructions < 90 < rows_per_core * 2, core["vector"]  # the table build and one block's steps


def test_tiling_refusal_reaches_the_launcher(kernel_runner, tmp_path):
    source = tmp_path / "in.bin"
    source.write_bytes(runner_input(bytes(2 * 16 * 4 + 2 * 2 * 8 * 4), conjugate=1, mode=0, dy_dtype=0, cos_dtype=0,
                                    dy=(1, 2, 1, 16), cos=(1, 2, 1, 8), start=0, end=8, cores=4, ub_bytes=256,
                                    npu_arch=2201))  # 256 B of UB
    result = subprocess.run([kernel_runner, str(source), str(tmp_path / "out.bin")], capture_output=True)
    assert result.returncode == 2


@pytest.mark.parametrize("line, complaint", [
    (b"conjugate=0 mode=0", "'cores' is missing"), (b"conjugate=0 mod=0", "unknown header field 'mod=0'"),
    (b"conjugate=x", "'conjugate=x' is not integers")])
def test_the_runner_refuses_a_header_by_name(kernel_runner, tmp_path, line, complaint):
    """The runner's fields travel by name: a misspelt, missing or malformed one is refused, never misread."""
    (tmp_path / "in.bin").write_bytes(line + b"\n")
    result = subprocess.run([kernel_runner, str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
                            capture_output=True, text=True)
    assert result.returncode == 1 and complaint in result.stderr


def test_cost_model_reads_the_counts(kernel_runner, tmp_path):
    """benchmarks/ascend_model.py on a small launch: a time above the HBM bound, an efficiency in (0, 1]."""
    from benchmarks import ascend_model
    chip = ascend_model.CHIPS["910B"]
    case = ("small", (2, 64, 8, 128), (1, 64, 1, 64), (0, 64), 0, "bfloat16")
    counts = ascend_model.count(kernel_runner, str(tmp_path), case, True, chip)
    us, efficiency, limit = ascend_model.model(counts, case, chip)
    hbm_us = 2 * 2 * 64 * 8 * 64 * 2 / (chip.hbm_gbs * 1e3)
    assert us > hbm_us + ascend_model.LAUNCH_US and 0 < efficiency < 1 and limit in ("HBM", "vector", "scalar")


# The ops that gather cos/sin rows by position (RotaryEmbedding on Ascend): cos/sin are a cache [1, P, 1, L],
# positions [1|B, S] pick each token's row inside the kernel (op_kernel/rotary_rows.h, CosRow); with several
# position channels [channels, 1|B, S], each cos/sin lane comes from the row of its own channel's position.
# name: (mode, dy dtype, cos dtype, dy shape, cache rows, slice, positions, dy's (B, S) axes, lane channels,
# cores, UB bytes)
GATHER_CASES = {
    "decode: one token each at its own position": (0, "bfloat16", "float32", (3, 1, 4, 128), 40, (0, 128),
                                                    [[37], [0], [39]], (0, 1), None, 3, UB_BYTES),
    "prefill: positions shared by the batch": (3, "float16", "float32", (2, 9, 2, 96), 64, (32, 96),
                                                [list(range(5, 14))], (0, 1), None, 4, UB_BYTES),
    "packed sequences: positions restart": (1, "float32", "bfloat16", (1, 10, 3, 64), 16, (0, 64),
                                            [[0, 1, 2, 3, 0, 1, 2, 0, 1, 2]], (0, 1), None, 3, UB_BYTES),
    "SBND, positions per batch": (0, "float32", "float16", (6, 2, 2, 80), 32, (16, 80),
                                  [[3, 4, 5, 9, 10, 11], [0, 1, 2, 3, 4, 5]], (1, 0), None, 5, UB_BYTES),
    "BNSD: a cos row per row": (2, "bfloat16", "bfloat16", (2, 3, 7, 128), 24, (0, 128),
                                [[6, 7, 8, 9, 10, 11, 12], [20, 2, 21, 3, 22, 4, 23]], (0, 2), None, 4, UB_BYTES),
    "many blocks, runs across blocks": (3, "bfloat16", "float32", (2, 48, 4, 192), 4096, (128, 192),
                                        [list(range(1000, 1048))], (0, 1), None, 2, 12 * 1024),
    "positions outside the cache are clamped into it": (0, "float32", "float32", (1, 4, 2, 64), 8, (0, 64),
                                                        [[-3, 7, 8, 1 << 40]], (0, 1), None, 2, UB_BYTES),
    "M-RoPE sections (Qwen2-VL)": (0, "bfloat16", "float32", (1, 6, 4, 128), 32, (0, 128),
                                   [[[0, 1, 2, 3, 4, 5]], [[0, 1, 1, 2, 2, 9]], [[0, 3, 4, 3, 4, 9]]], (0, 1),
                                   mrope_lane_channels(0, 128, (16, 24, 24), False), 3, UB_BYTES),
    "M-RoPE interleaved (Qwen3-VL)": (0, "float16", "float16", (2, 5, 2, 128), 40, (0, 128),
                                      [[[5, 6, 7, 8, 9], [0, 1, 2, 3, 4]], [[5, 6, 6, 7, 39], [0, 1, 1, 2, 2]],
                                       [[5, 7, 8, 7, 8], [0, 0, 1, 2, 3]]], (0, 1),
                                      mrope_lane_channels(0, 128, (24, 20, 20), True), 4, UB_BYTES),
    "M-RoPE on sections of lanes, 4 axes (HunYuan-VL)": (0, "float32", "bfloat16", (1, 5, 2, 64), 24, (0, 64),
                                                        np.random.default_rng(8).integers(24, size=(4, 1, 5)), (0, 1),
                                                        mrope_lane_channels(0, 64, (4, 12, 8, 8), "lanes"), 3,
                                                        UB_BYTES),
    "quarter mode: token and block positions": (2, "float32", "bfloat16", (2, 7, 3, 64), 16, (0, 64),
                                                [[list(range(7))], [[0, 0, 0, 1, 2, 3, 4]]], (0, 1),
                                                (0,) * 32 + (1,) * 32, 5, UB_BYTES),
    "M-RoPE, BNSD, over 255 slots a block (And repeats split)": (1, "float32", "float16", (1, 2, 300, 64), 512,
                                                                (0, 64), np.random.default_rng(7).integers(
                                                                    512, size=(3, 1, 300)), (0, 2),
                                                                mrope_lane_channels(1, 64, (8, 12, 12), False), 1,
                                                                4 << 20),  # a UB this large: one block of 600
    "random lane channels, BNSD, many blocks": (3, "bfloat16", "bfloat16", (2, 4, 40, 192), 64, (64, 192),
                                                np.random.default_rng(6).integers(64, size=(3, 2, 40)), (0, 2),
                                                tuple(np.random.default_rng(5).integers(3, size=128)), 2, 12 * 1024),
}


@pytest.mark.parametrize("arch", [2201, 3510], ids=["910B", "950"])
@pytest.mark.parametrize("conjugate", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("name", GATHER_CASES)
def test_kernels_gather_cos_sin_by_position(kernel_runner, tmp_path, name, conjugate, arch):
    mode, dy_dtype, cos_dtype, dy_shape, cache, (start, end), positions, axes, lanes, cores, ub = GATHER_CASES[name]
    counts = run_on_host(kernel_runner, tmp_path, conjugate, mode, dy_dtype, cos_dtype, dy_shape,
                         (1, cache, 1, end - start), start, end, cores, ub, seed=mode, arch=arch,
                         positions=np.array(positions), axes=axes, lane_channels=lanes)
    # every slice here fits the register path; several channels go to the memory kernel, on the 950 too
    assert register_path_ran(counts) == (arch == 3510 and lanes is None)


# The q+k ops: k (its own head count) rotated in the same launch, each core taking a share of q's rows, then
# of k's. name: GATHER_CASES' name, k's heads, cores.
QK_CASES = {"decode, MQA": ("decode: one token each at its own position", 1, 2),
            "prefill, GQA": ("prefill: positions shared by the batch", 1, 3),
            "SBND": ("SBND, positions per batch", 1, 4),
            "BNSD": ("BNSD: a cos row per row", 2, 3),
            "M-RoPE, the memory kernel on both chips": ("M-RoPE sections (Qwen2-VL)", 2, 2),
            "many blocks": ("many blocks, runs across blocks", 1, 2)}


@pytest.mark.parametrize("arch", [2201, 3510], ids=["910B", "950"])
@pytest.mark.parametrize("conjugate", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("name", QK_CASES)
def test_q_and_k_in_one_launch(kernel_runner, tmp_path, name, conjugate, arch):
    case, k_heads, cores = QK_CASES[name]
    mode, dy_dtype, cos_dtype, dy_shape, cache, (start, end), positions, axes, lanes, _, ub = GATHER_CASES[case]
    run_on_host(kernel_runner, tmp_path, conjugate, mode, dy_dtype, cos_dtype, dy_shape, (1, cache, 1, end - start),
                start, end, cores, ub, seed=mode, arch=arch, positions=np.array(positions), axes=axes,
                lane_channels=lanes, k_heads=k_heads)


@pytest.mark.parametrize("arch", [2201, 3510], ids=["910B", "950"])
@pytest.mark.parametrize("conjugate", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("mode", range(4))
def test_gathering_every_mode_and_dtype(kernel_runner, tmp_path, mode, conjugate, arch):
    dy_dtype, cos_dtype = list(itertools.product(DTYPE_IDS, DTYPE_IDS))[(mode * 2 + conjugate + arch) % 9]
    positions = np.array([[4, 5, 6, 30], [0, 31, 12, 12]])
    run_on_host(kernel_runner, tmp_path, conjugate, mode, dy_dtype, cos_dtype, (2, 4, 3, 80), (1, 32, 1, 64), 8,
                72, 3, seed=mode, arch=arch, positions=positions)


def test_gathering_prefill_copies_cos_as_a_table_would(kernel_runner, tmp_path):
    """Consecutive positions (a prompt) read their cache rows with one copy per block, as a [1, S, 1, L] table
    would; each token's position is read once or twice (a run's end, then the next run's start)."""
    dy_shape, start, end = (1, 64, 8, 128), 0, 128
    gathered_counts = run_on_host(kernel_runner, tmp_path, False, 0, "bfloat16", "float32", dy_shape,
                                  (1, 8192, 1, 128), start, end, 4, positions=np.arange(100, 164)[None])
    table_counts = run_on_host(kernel_runner, tmp_path, False, 0, "bfloat16", "float32", dy_shape, (1, 64, 1, 128),
                               start, end, 4)
    for gathered_core, table_core in zip(gathered_counts["cores"], table_counts["cores"]):
        assert gathered_core["mte2"] == table_core["mte2"] and gathered_core["vector"] == table_core["vector"]
        assert table_core["gm_scalar_reads"] == 0 and 16 <= gathered_core["gm_scalar_reads"] <= 2 * 16


@pytest.mark.slow
@pytest.mark.parametrize("arch", [2201, 3510])
@pytest.mark.parametrize("seed", range(200))
def test_random_launches_bit_for_bit(kernel_runner, tmp_path, seed, arch):
    """Random shapes, slices, broadcasts, dtypes, core counts and UB sizes (-m slow: 400 launches). Slices of
    16..192 pairs a segment, so on the 950 most take the register-based kernel."""
    rng = np.random.default_rng(seed)
    mode = int(rng.integers(4))
    pairs = int(rng.choice([3, 8, 12, 16, 20, 32, 48, 64, 128, 192]))
    length = pairs * (4 if mode == 2 else 2)
    head = length + int(rng.choice([0, 8, 16, 64]))
    start = int(rng.integers(head - length + 1))
    dy_shape = (int(rng.integers(1, 4)), int(rng.integers(1, 10)), int(rng.integers(1, 6)), head)
    pattern = BROADCASTS[int(rng.integers(len(BROADCASTS)))]
    dy_dtype, cos_dtype = (list(DTYPE_IDS)[int(i)] for i in rng.integers(3, size=2))
    cores, ub_bytes = int(rng.choice([1, 2, 3, 7, 72])), int(rng.choice([16 * 1024, 64 * 1024, UB_BYTES]))
    try:
        run_on_host(kernel_runner, tmp_path, bool(rng.integers(2)), mode, dy_dtype, cos_dtype, dy_shape,
                    cos_shape(dy_shape, pattern, length), start, start + length, cores, ub_bytes, seed, arch)
    except AssertionError:
        source = tmp_path / "in.bin"
        if subprocess.run([kernel_runner, str(source), str(tmp_path / "o.bin")]).returncode == 2:
            pytest.skip("the tiling refuses this unified buffer for this row")  # too small a UB: refused
        raise


@pytest.mark.slow
@pytest.mark.parametrize("arch", [2201, 3510])
@pytest.mark.parametrize("seed", range(50))
def test_random_gathering_launches_bit_for_bit(kernel_runner, tmp_path, seed, arch):
    """Random launches of the ops that gather by position (-m slow: 100): layouts, positions per batch or
    shared, one to three channels with random lane channels, k of its own head count or none, out-of-cache
    positions, core counts and UB sizes."""
    rng = np.random.default_rng(1000 + seed)
    mode = int(rng.integers(4))
    pairs = int(rng.choice([8, 12, 16, 32, 64]))
    length = pairs * (4 if mode == 2 else 2)
    head = length + int(rng.choice([0, 16, 64]))
    start = int(rng.integers(head - length + 1))
    axes = [(0, 1), (1, 0), (0, 2)][int(rng.integers(3))]
    batch, seq, heads = (int(n) for n in rng.integers(1, [4, 12, 6]))
    dy_shape = [0, 0, 0, head]
    dy_shape[axes[0]], dy_shape[axes[1]], dy_shape[3 - sum(axes)] = batch, seq, heads
    channels, cache = int(rng.choice([1, 1, 2, 3])), int(rng.integers(1, 64))
    positions = rng.integers(-2, cache + 2, size=(channels, int(rng.choice([1, batch])), seq))
    lanes = tuple(rng.integers(channels, size=length)) if channels > 1 else None
    dy_dtype, cos_dtype = (list(DTYPE_IDS)[int(i)] for i in rng.integers(3, size=2))
    cores, ub_bytes = int(rng.choice([1, 2, 3, 7, 72])), int(rng.choice([16 * 1024, 64 * 1024, UB_BYTES]))
    try:
        run_on_host(kernel_runner, tmp_path, bool(rng.integers(2)), mode, dy_dtype, cos_dtype, tuple(dy_shape),
                    (1, cache, 1, length), start, start + length, cores, ub_bytes, seed, arch, positions=positions,
                    axes=axes, lane_channels=lanes, k_heads=int(rng.integers(0, 4)))
    except AssertionError:
        source = tmp_path / "in.bin"
        if subprocess.run([kernel_runner, str(source), str(tmp_path / "o.bin")]).returncode == 2:
            pytest.skip("the tiling refuses this unified buffer for this row")
        raise
