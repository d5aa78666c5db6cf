"""One frozen description of a kernel call: what every target (kernels.py) and the autograd wiring
(functions.py) are built from."""
from dataclasses import dataclass, replace
from typing import Optional, Tuple


@dataclass(frozen=True)
class RotaryCall:
    rotary_mode: int                           # 0 half, 1 interleave, 2 quarter, 3 interleave-half
    partial_slice: Optional[Tuple[int, int]]   # None: [0, cos.shape[-1])
    conjugate: bool                            # False: the forward y = R x; True: its transpose R^T (the grad)
    in_place: bool                             # writes its first input (and returns it) instead of a new tensor
    input_name: str = "dy"                     # the first input's name in error messages

    def transpose(self):
        """The call that maps the gradient of this call's output to the gradient of its first input: the
        other direction, out of place (autograd's dout must never be written)."""
        return replace(self, conjugate=not self.conjugate, in_place=False, input_name="dout")

    def out_of_place(self):
        return replace(self, in_place=False)
