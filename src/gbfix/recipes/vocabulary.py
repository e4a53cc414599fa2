"""What the recipes know of torch's API: each family of tensor calls defined once.

A recipe that needs a narrower set for a reason of its own (branch's maps with a finite
gradient, shapes' reductions it can rewrite) builds it from these and says why.
"""

from __future__ import annotations


def words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# May return their receiver (first argument) or share its memory: a write through the
# result writes the input, and torch.cond refuses a branch output that aliases an input.
ALIASING = words(
    "view view_as reshape reshape_as flatten unflatten squeeze unsqueeze t T mT H mH transpose permute expand"
    " expand_as narrow select unbind split chunk tensor_split detach contiguous to type type_as float double"
    " half bfloat16 int long bool cpu cuda as_strided diagonal movedim moveaxis swapaxes swapdims unfold"
    " view_as_real view_as_complex broadcast_to real imag numpy"
)
# Views that only change the shape (same elements, same dtype).
SHAPE_VIEWS = words(
    "view view_as reshape reshape_as squeeze unsqueeze flatten unflatten expand expand_as transpose permute narrow"
    " select t"
)
# Shape-keeping calls that convert dtype or device, or return the receiver itself.
CASTS = words("float double half bfloat16 long int short byte char bool to type_as detach contiguous cpu cuda")
# Shape-keeping boolean maps (comparisons broadcast with their argument).
PREDICATES = words(
    "isnan isinf isfinite isneginf isposinf isreal logical_and logical_or logical_not logical_xor"
    " eq ne gt ge lt le greater greater_equal less less_equal"
)
# Reductions over every element when called without a dim: 0-dim results.
FULL_REDUCTIONS = words(
    "sum mean max min amax amin prod norm std var median nansum nanmean nanmedian all any count_nonzero"
)
# These return (values, indices) once given a dim.
TUPLE_WITH_DIM = words("max min median nanmedian mode kthvalue aminmax")
# Shape-keeping maps that always allocate.
ELEMENTWISE = words(
    "abs neg negative exp expm1 log log1p log2 log10 sqrt rsqrt sigmoid tanh relu sin cos erf reciprocal"
    " square sign sgn floor ceil round trunc frac clamp clip clamp_min clamp_max pow mul div add sub clone"
    " nan_to_num masked_fill"
)
