"""CustomRegOp registration info, one module per target (installed as ms_rotary.op_info)."""
