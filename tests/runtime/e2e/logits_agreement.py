"""The end-to-end checks' comparison of two first-forward logit dumps (dlm-run --dump-logits, or
the reference's .npy): same shape, and the largest difference within `tolerance` of the largest
magnitude of the one compared against."""


def first_logits_problems(ours_path, theirs_path, tolerance, theirs_name):
    import numpy as np
    a, b = np.load(ours_path), np.load(theirs_path)
    if a.shape != b.shape:
        return [f"first logits shape {a.shape} != {theirs_name} {b.shape}"]
    err = float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))
    if not err <= tolerance:
        return [f"first logits relative error {err:.2e} > {tolerance}"]
    return []
