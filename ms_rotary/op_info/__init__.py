"""CustomRegOp registration info, one module per target."""
