"""Exact IEEE-754 arithmetic for test oracles, independent of any BLAS, numpy or torch kernel.

Every operation computes the exact rational result (fractions.Fraction) and rounds it once,
to nearest with ties to even, into binary32 or bfloat16, as IEEE-754 prescribes for +, * and
fused multiply-add. Values travel as Python floats (every binary32 and bfloat16 value is exact
in binary64). Subnormals are handled; overflow gives inf; NaN inputs are not supported.
"""
import math
import struct
from fractions import Fraction

# (significand bits including the implicit one, minimum normal exponent, maximum exponent)
BINARY32 = (24, -126, 127)
BFLOAT16 = (8, -126, 127)


def _round(q, fmt):
    """The value of format `fmt` nearest to the nonzero rational q (ties to even)."""
    precision, emin, emax = fmt
    sign = -1 if q < 0 else 1
    q = abs(q)
    # e = floor(log2(q)), found from the bit lengths and then corrected by one step at most.
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    elif Fraction(2) ** (e + 1) <= q:
        e += 1
    ulp_exp = max(e, emin) - (precision - 1)
    scaled = q / Fraction(2) ** ulp_exp
    n = scaled.numerator // scaled.denominator
    rest = scaled - n
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2 == 1):
        n += 1
    value = Fraction(n) * Fraction(2) ** ulp_exp
    if value >= Fraction(2) ** (emax + 1):
        return sign * math.inf
    return sign * float(value)


def _zero_sum_sign(x_is_neg_zero, y_is_neg_zero):
    # An exact zero sum is -0 only when both addends are -0 (round to nearest).
    return -0.0 if x_is_neg_zero and y_is_neg_zero else 0.0


def _is_neg_zero(x):
    return x == 0 and math.copysign(1.0, x) < 0


def round_to(x, fmt):
    """x (a float or Fraction) rounded once into fmt."""
    q = Fraction(x)
    if q == 0:
        return math.copysign(0.0, float(x)) if isinstance(x, float) else 0.0
    return _round(q, fmt)


def mul(a, b, fmt=BINARY32):
    q = Fraction(a) * Fraction(b)
    if q == 0:
        return math.copysign(0.0, a) * math.copysign(1.0, b)
    return _round(q, fmt)


def add(a, b, fmt=BINARY32):
    q = Fraction(a) + Fraction(b)
    if q == 0:
        return _zero_sum_sign(_is_neg_zero(a), _is_neg_zero(b))
    return _round(q, fmt)


def fma(a, b, c, fmt=BINARY32):
    """a * b + c with one rounding."""
    q = Fraction(a) * Fraction(b) + Fraction(c)
    if q == 0:
        product_neg_zero = (a == 0 or b == 0) and (math.copysign(1.0, a) * math.copysign(1.0, b) < 0)
        product_is_zero = a == 0 or b == 0
        if product_is_zero and c == 0:
            return _zero_sum_sign(product_neg_zero, _is_neg_zero(c))
        return 0.0
    return _round(q, fmt)


def bf16_bits(x):
    """The 16-bit pattern of x rounded to bfloat16 (x: a binary32 value)."""
    y = round_to(x, BFLOAT16)
    return struct.unpack("<I", struct.pack("<f", y))[0] >> 16


def f32_of_bf16_bits(bits):
    return struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0]


def merged_bf16_bits(w_bits, b_row, a_col, scale):
    """The merge contract for one element (docs/bundle-format.md):
    acc = +0; for p ascending: acc = fma(B[i,p], A[p,j], acc); t = acc * scale;
    s = f32(W[i,j]) + t; out = bf16 round-to-nearest-even(s)."""
    acc = 0.0
    for b, a in zip(b_row, a_col):
        acc = fma(b, a, acc)
    t = mul(acc, scale)
    s = add(f32_of_bf16_bits(w_bits), t)
    return bf16_bits(s)


# ---------------------------------------------------------------- vectorised (numpy) form
# The same roundings for whole arrays, by a different route: binary64 holds every binary32
# product exactly, TwoSum gives the exact error of a binary64 sum, and rounding that sum to odd
# before rounding to binary32 makes the two roundings equal to one (binary64 has more than
# 24 + 1 bits). Used to check every element of a tensor; the Fraction form above checks this
# one on samples.

def _round_to_odd_sum(x, y):
    import numpy as np
    s = x + y
    bb = s - x
    err = (x - (s - bb)) + (y - bb)
    odd = (s.view(np.int64) & 1) == 1
    toward = np.nextafter(s, np.where(err > 0, np.inf, -np.inf))
    return np.where((err == 0) | odd, s, toward)


def fma_f32_array(a, b, c):
    """Elementwise binary32 fma(a, b, c) for float32 numpy arrays."""
    import numpy as np
    p = a.astype(np.float64) * b.astype(np.float64)
    return _round_to_odd_sum(p, c.astype(np.float64)).astype(np.float32)


def add_f32_array(a, b):
    import numpy as np
    return _round_to_odd_sum(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)


def mul_f32_array(a, b):
    import numpy as np
    return (a.astype(np.float64) * np.float64(b)).astype(np.float32)  # exact in binary64


def bf16_bits_array(x):
    """float32 array -> uint16 bfloat16 patterns, round to nearest even (finite inputs)."""
    import numpy as np
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def merged_bf16_bits_array(w_bits, b, a, scale):
    """The merge contract for a whole target: w_bits uint16 [rows, cols], b float32 [rows, r],
    a float32 [r, cols] -> uint16 [rows, cols]."""
    import numpy as np
    acc = np.zeros(w_bits.shape, dtype=np.float32)
    for p in range(b.shape[1]):
        acc = fma_f32_array(np.broadcast_to(b[:, p:p + 1], acc.shape), np.broadcast_to(a[p], acc.shape), acc)
    t = mul_f32_array(acc, scale)
    w = (w_bits.astype(np.uint32) << 16).view(np.float32)
    return bf16_bits_array(add_f32_array(w, t))


# ---------------------------------------------------------------- another summation order
def merge_orders_bound(got, want, B, A, scale):
    """Per element, how far two float32 evaluations of bf16(W + (B @ A) * scale) can be apart
    when B @ A sums its r products in different orders (torch tensors in, float64 tensor out;
    standard error analysis, u = 2^-24): each sum is within gamma_r = r u / (1 - r u) of
    sum |b||a| of the exact one, the multiply and the add round once more each, and each BF16
    rounding moves at most half a BF16 ulp. Where W + ... cancels, this exceeds one ulp."""
    import torch
    u = 2.0 ** -24
    r = B.shape[1]
    gamma = r * u / (1 - r * u)
    mag = B.double().abs() @ A.double().abs()
    m = torch.maximum(got.double().abs(), want.double().abs())
    ulp = torch.pow(2.0, torch.floor(torch.log2(m.clamp_min(2.0 ** -126))) - 7)
    return ulp + 4 * u * m + scale * mag * (2 * gamma + 2 * u * (1 + gamma))
