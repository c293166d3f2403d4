"""Counter-based random numbers shared by every dlm backend.

Every random draw in a decoding program is a pure function of
(seed, request, stream, step, position[, vocabulary index]); no generator state is carried
between steps, so the Python reference, the CPU backend and the CUDA kernels produce the same
tokens for the same seed regardless of batching, threading or kernel order.

Definition (all arithmetic modulo 2^64; the C++ runtime implements exactly the same):

    mix64(z):  z = z + 0x9E3779B97F4A7C15
               z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
               z = (z ^ (z >> 27)) * 0x94D049BB133111EB
               return z ^ (z >> 31)
    key(seed, request, stream, step, position)
             = mix64(mix64(mix64(mix64(mix64(seed) ^ request) ^ stream) ^ step) ^ position)
    uniform(key, v)      = ((mix64(key ^ v) >> 11) + 0.5) * 2^-53     # float64 in (0, 1)
    gumbel(key, v)       = -log(-log(uniform(key, v)))                # float64
    random_token(key, V) = mix64(key) mod V

Streams: 0 = Gumbel noise over the vocabulary, 1 = renoise token id, 2 = initial canvas token id.
`step` is the global denoising-step counter of the request (see samplers.py), `position` the
absolute sequence position of the canvas slot.
"""

import numpy as np

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
MUL1 = 0xBF58476D1CE4E5B9
MUL2 = 0x94D049BB133111EB

STREAM_GUMBEL = 0
STREAM_RENOISE = 1
STREAM_INIT = 2

_U64 = np.uint64


def mix64(z):
    """SplitMix64 finaliser of a Python int (returns a Python int in [0, 2^64))."""
    z = (int(z) + GOLDEN) & MASK64
    z = ((z ^ (z >> 30)) * MUL1) & MASK64
    z = ((z ^ (z >> 27)) * MUL2) & MASK64
    return z ^ (z >> 31)


def mix64_np(z):
    """mix64 over a numpy uint64 array (wrapping arithmetic)."""
    z = np.asarray(z, dtype=_U64)
    with np.errstate(over="ignore"):
        z = z + _U64(GOLDEN)
        z = (z ^ (z >> _U64(30))) * _U64(MUL1)
        z = (z ^ (z >> _U64(27))) * _U64(MUL2)
        return z ^ (z >> _U64(31))


def key(seed, request, stream, step, position):
    """Per-draw key (Python int)."""
    k = mix64(int(seed) & MASK64)
    k = mix64(k ^ (int(request) & MASK64))
    k = mix64(k ^ (int(stream) & MASK64))
    k = mix64(k ^ (int(step) & MASK64))
    return mix64(k ^ (int(position) & MASK64))


def keys(seed, request, stream, step, positions):
    """Keys for many positions at once: uint64 array shaped like `positions`."""
    k = mix64(int(seed) & MASK64)
    k = mix64(k ^ (int(request) & MASK64))
    k = mix64(k ^ (int(stream) & MASK64))
    k = mix64(k ^ (int(step) & MASK64))
    pos = np.asarray(positions, dtype=np.int64).astype(_U64)
    return mix64_np(pos ^ _U64(k))


_INV53 = 2.0 ** -53


def _bits_to_uniform(bits):
    return ((bits >> _U64(11)).astype(np.float64) + 0.5) * _INV53


def uniform(k, v):
    """uniform(key, v) for a scalar key and scalar or array v (float64 in (0,1))."""
    kk = np.asarray(k, dtype=_U64)
    vv = np.asarray(v, dtype=_U64)
    return _bits_to_uniform(mix64_np(kk ^ vv))


def uniform_vocab(keys_arr, V):
    """uniform(key, v) for every key in `keys_arr` (shape [...]) and v = 0..V-1 -> [..., V]."""
    kk = np.asarray(keys_arr, dtype=_U64)[..., None]
    vv = np.arange(V, dtype=_U64)
    return _bits_to_uniform(mix64_np(kk ^ vv))


def gumbel(k, v):
    return -np.log(-np.log(uniform(k, v)))


def gumbel_vocab(keys_arr, V):
    """Gumbel noise [..., V] for each key, float64."""
    return -np.log(-np.log(uniform_vocab(keys_arr, V)))


def random_token(k, V):
    """mix64(key) mod V for a scalar key (Python int) or a uint64 array of keys."""
    if isinstance(k, (int, np.integer)) and not isinstance(k, np.ndarray):
        return mix64(int(k)) % int(V)
    return (mix64_np(k) % _U64(V)).astype(np.int64)


def known_answers():
    """A few values the C++ tests copy as known answers."""
    k0 = key(0, 0, 0, 0, 0)
    out = {
        "mix64(0)": mix64(0),
        "key(0,0,0,0,0)": k0,
        "key(1,2,0,3,4)": key(1, 2, 0, 3, 4),
        "key(42,7,1,5,100)": key(42, 7, 1, 5, 100),
        "uniform(key(0,0,0,0,0), v) v=0..3": [float(x) for x in uniform(k0, np.arange(4))],
        "gumbel(key(0,0,0,0,0), v) v=0..3": [float(x) for x in gumbel(k0, np.arange(4))],
        "random_token(key(0,0,1,0,0), 512)": random_token(key(0, 0, 1, 0, 0), 512),
        "random_token(key(0,0,2,0,5), 512)": random_token(key(0, 0, 2, 0, 5), 512),
    }
    return out


if __name__ == "__main__":
    for name, val in known_answers().items():
        if isinstance(val, int):
            print(f"{name} = {val} (0x{val:016X})")
        else:
            print(f"{name} = {[repr(x) for x in val]}")
