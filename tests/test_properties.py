"""Property-based: random shapes, broadcast patterns, slices, modes and dtypes against the float64
reference. Profiles (HYPOTHESIS_PROFILE): "ci" (default, derandomized, 60 examples per property, a few
seconds) and "soak" (3000 examples each, random seeds:
`HYPOTHESIS_PROFILE=soak pytest tests/test_properties.py`)."""
import os

import numpy as np
from conftest import BACKENDS, BROADCASTS, DTYPES, TOLERANCE, cos_shape, random_tensor, to_float64
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import rotary_forward, rotary_grad

import ms_rotary

settings.register_profile("ci", max_examples=60, derandomize=True, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("soak", max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@st.composite
def problems(draw):
    mode = draw(st.integers(0, 3))
    multiple = 4 if mode == 2 else 2
    dims = [draw(st.integers(1, 4)) for _ in range(3)]
    head_dim = draw(st.integers(1, 48)) * 2
    length = draw(st.integers(0, head_dim // multiple)) * multiple
    start = draw(st.integers(0, head_dim - length))
    pattern = draw(st.sampled_from(BROADCASTS))
    return dict(mode=mode, dy_shape=(*dims, head_dim), start=start, end=start + length, pattern=pattern,
                dy_dtype=draw(st.sampled_from(list(DTYPES))), cos_dtype=draw(st.sampled_from(list(DTYPES))),
                backend=draw(st.sampled_from(BACKENDS)), seed=draw(st.integers(0, 2**32 - 1)),
                slice_none=draw(st.booleans()) and start == 0 and length > 0)


def _run(problem, op_class, reference, keeps_input=False):
    rng = np.random.default_rng(problem["seed"])
    start, end = problem["start"], problem["end"]
    dy, dy64 = random_tensor(rng, problem["dy_shape"], problem["dy_dtype"])
    shape = cos_shape(problem["dy_shape"], problem["pattern"], max(end - start, 2))
    cos, cos64 = random_tensor(rng, shape, problem["cos_dtype"])
    sin, sin64 = random_tensor(rng, shape, problem["cos_dtype"])
    partial_slice = None if problem["slice_none"] else [start, end]
    out = op_class(problem["mode"], partial_slice, backend=problem["backend"])(dy, cos, sin)
    tol = TOLERANCE[problem["dy_dtype"]]
    np.testing.assert_allclose(to_float64(out), reference(problem["mode"], dy64, cos64, sin64, start, end),
                               rtol=tol, atol=tol)
    if keeps_input:
        np.testing.assert_array_equal(to_float64(dy), dy64)
    else:
        assert out is dy


@given(problems())
def test_grad_matches_reference(problem):
    _run(problem, ms_rotary.InplacePartialRotaryMulGrad, rotary_grad)


@given(problems())
def test_forward_matches_reference(problem):
    _run(problem, ms_rotary.InplacePartialRotaryMul, rotary_forward)


@given(problems())
def test_out_of_place_forward_matches_reference_and_keeps_x(problem):
    _run(problem, ms_rotary.PartialRotaryMul, rotary_forward, keeps_input=True)
