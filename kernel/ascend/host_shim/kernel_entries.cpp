// The six kernel entry points as one translation unit for the host runner: they instantiate the same kernel
// classes, which compile once here (a CANN build compiles each op's entry on its own).
#include "../op_kernel/ms_rotary_partial_rotary_mul.cpp"
#include "../op_kernel/ms_rotary_partial_rotary_mul_grad.cpp"
#include "../op_kernel/ms_rotary_partial_rotary_mul_positions.cpp"
#include "../op_kernel/ms_rotary_partial_rotary_mul_positions_grad.cpp"
#include "../op_kernel/ms_rotary_partial_rotary_mul_positions_qk.cpp"
#include "../op_kernel/ms_rotary_partial_rotary_mul_positions_qk_grad.cpp"
