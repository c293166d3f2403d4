"""Reference decoding programs (plain numpy over the reference model's float32 logits).

All sampler arithmetic (softmax, confidence, entropy, Gumbel noise) is done in float64 on the
float32 logits.  All randomness comes from counter_rng with
key(seed, request, stream, step, absolute_position):

  stream 0: Gumbel noise over the vocabulary (v = 0..V-1, V = logits width = vocab_size)
  stream 1: renoise token id           (entropy-bound, uniform-noise models)
  stream 2: initial canvas token id    (entropy-bound, uniform-noise models)

`step` is the request's global denoising-step counter: 0 for the first forward whose logits are
decoded, +1 for each further one, never reset between blocks.  For `low-confidence` every
forward decodes, so step = number of forwards run before this one.  For `entropy-bound` with
`cache="prefix"` the prefix passes (prompt / committed canvases) do not decode and do not advance
the counter, so the same seed gives the same draws with or without the cache.

The mask token is never a decoding result: for mask-absorbing models (config has mask_token_id)
its column is excluded from every argmax (x0, x_samp, x_arg).  Softmax, confidence and entropy
are taken over the full logits row, mask column included.  Columns are exactly vocab_size wide
(models.py drops LLaDA's padded embedding rows).

Policies
--------
low_confidence  LLaDA / Fast-dLLM `generate` (SPECS §5): x = prompt ++ gen_length masks; blocks of
    block_length left to right; steps_per_block = steps / num_blocks.  Each step: forward,
    candidates = masked positions of the current block, x0 = argmax(logits + T*g) (T = 0: plain
    argmax), conf = softmax(logits)[x0]; fixed schedule: unmask the k most confident (k from
    num_transfer_tokens over the block's masks, ties -> lower position first); threshold: unmask
    every candidate with conf >= threshold and at least the most confident one, for as many
    steps as the block needs whatever `steps` says (Fast-dLLM's, dInfer's and SGLang's
    threshold decoding).  The block loop ends when the block has no masks.  With step_cap (off
    by default) the step_cap-th forward of a block unmasks every remaining candidate.
    Early stop: after a block is finished, if it contains EOS everything after it becomes EOS and
    generation stops.
    cache="prefix" (Fast-dLLM prefix cache): the first step of a block is a full forward whose
    logits are decoded; K/V of [0, block_start) is kept; later steps feed x[block_start:] at
    positions block_start..L-1 over the cached prefix.  For logit-shift models (Dream) the cache
    keeps [0, block_start-1) and the fed chunk starts one position earlier, so the shifted row of
    block_start is exact.
    cache="dual" (Fast-dLLM / dInfer dual cache): the first step of a block is a full forward
    whose logits are decoded and whose K/V of every position (the later blocks' masks included)
    are kept; later steps feed only x[keep:block_end] (keep as for the prefix cache) at their
    positions, attending to that first forward's K/V of [0, keep) and [block_end, L) and to
    their own fresh K/V, which serve that forward only.
    Vicinity refresh (dInfer, with the dual cache): prefix_look and after_look widen the later
    steps' window to x[max(0, min(keep, block_start - prefix_look)) : min(L, block_end +
    after_look)] (its logits of the block's rows decoded); with warmup_steps > 0 the request's steps 0..warmup_steps
    (the global counter) are full forwards: dInfer's warmup forwards (its `iter_no <
    warmup_steps`) keep no cache, so the step after them builds it with a full forward.  dInfer
    may run a second full forward when the warmup ends inside a later block (its block-change
    test is skipped on the step that builds the cache); that is not reproduced.
    Iteration smoothing (dInfer's IterationSmooth, appendix A.1; cache none or prefix): the input
    embeddings are kept across steps, E[x] at first; after step j decodes, every position the
    forward fed (all, or x[keep:] for the prefix cache's later steps) gets E[x] and, where still
    masked, E[mask] + w_j * softmax(z) @ E with z the step's logits of that position and w_j =
    min(smoothing_init + smoothing_growth j, smoothing). Step j's threshold (the threshold
    rule's, the hierarchical rule's high one) is max(1 - threshold_decay j, threshold); the
    fixed count ignores it. j: the global step. One forward a step: dInfer's extra cached
    forward right after a block's updating full forward (which re-embeds and advances its
    step count) is not reproduced, as for the prefix cache without smoothing.

entropy_bound   DiffusionGemma (SPECS §1.5) on a mask-absorbing model: per canvas of block_length
    positions (initialised to the mask token; uniform-noise models: random_token stream 2 with
    the step of the canvas's first denoising step), for n = 0..S-1:
    T_n = t_min + (t_max - t_min)(S - n)/S, z = logits/T_n, p = softmax z, H = entropy,
    x_samp = argmax(z + g), x_arg = argmax z; accept positions in order of ascending H (ties ->
    lower position) while cumsum(H) - H_current <= entropy_bound (the lowest is always
    accepted); accepted positions take x_samp, rejected ones are renoised (mask token, or
    random_token stream 1 for uniform-noise models); converged iff (x_arg equals each of the
    previous stability_threshold argmax canvases (history starts at -1) and mean H <
    confidence_threshold) or n = S-1.  The argmax canvas x_arg of the last step is committed.
    The forward is over prompt ++ committed ++ canvas (cache none: full bidirectional pass
    every step; cache prefix: K/V of prompt ++ committed from one extra forward per canvas).
    Early stop at EOS after a committed canvas.
"""

import time

import numpy as np
import torch

import counter_rng as rng


class GenerateError(ValueError):
    pass


def num_transfer_tokens(n, steps):
    """Fast-dLLM get_num_transfer_tokens for one row: base = n // steps, first n % steps get +1."""
    if steps <= 0:
        raise GenerateError("steps must be positive")
    base, rem = divmod(int(n), int(steps))
    return [base + 1 if i < rem else base for i in range(steps)]


def softmax64(z):
    z = np.asarray(z, dtype=np.float64)
    m = z.max(axis=-1, keepdims=True)
    e = np.exp(z - m)
    return e / e.sum(axis=-1, keepdims=True)


def log_softmax64(z):
    z = np.asarray(z, dtype=np.float64)
    m = z.max(axis=-1, keepdims=True)
    s = z - m
    return s - np.log(np.exp(s).sum(axis=-1, keepdims=True))


def entropy64(z):
    """Entropy of softmax(z) per row, float64."""
    lp = log_softmax64(z)
    p = np.exp(lp)
    return -(p * np.where(p > 0, lp, 0.0)).sum(axis=-1)


def top_k_order(conf, positions):
    """Indices of `conf` by descending confidence; ties -> lower position first."""
    conf = np.asarray(conf, dtype=np.float64)
    positions = np.asarray(positions)
    return np.lexsort((positions, -conf))


def entropy_accept(H, bound):
    """Entropy-bound accept rule.  Returns a bool mask over positions (index order).

    Walk positions by ascending entropy (ties -> lower index); accept position pi_k iff
    sum_{j<k} H[pi_j] <= bound, computed as cumsum - current <= bound.  The lowest-entropy
    position is always accepted.
    """
    H = np.asarray(H, dtype=np.float64)
    order = np.lexsort((np.arange(H.shape[0]), H))
    hs = H[order]
    before = np.cumsum(hs) - hs
    acc_sorted = before <= bound
    if acc_sorted.size:
        acc_sorted[0] = True
    acc = np.zeros(H.shape[0], dtype=bool)
    acc[order] = acc_sorted
    return acc


def _excluded(z, mask_id):
    if mask_id is None or not (0 <= mask_id < z.shape[-1]):
        return z
    z = np.array(z, dtype=np.float64, copy=True)
    z[..., mask_id] = -np.inf
    return z


def decode_rows(logits, positions, temperature, seed, request, step, mask_id):
    """x0 = argmax(logits + T*g) (mask excluded) and conf = softmax(logits)[x0] per row."""
    lg = np.asarray(logits, dtype=np.float64)
    V = lg.shape[-1]
    zs = lg
    if temperature and temperature > 0:
        g = rng.gumbel_vocab(rng.keys(seed, request, rng.STREAM_GUMBEL, step, positions), V)
        zs = lg + float(temperature) * g
    zs = _excluded(zs, mask_id)
    x0 = zs.argmax(axis=-1)
    conf = softmax64(lg)[np.arange(lg.shape[0]), x0]
    return x0.astype(np.int64), conf


def hierarchical_accept(conf, pos, threshold, low_threshold, depth):
    """dInfer's hierarchical decoding (HierarchyDecoder; dInfer paper appendix B.1), with the
    paper's recursion to `depth` levels (depth 1 = dInfer's code).  conf / pos: the step's
    candidates in position order.  Returns a bool mask over them: the global top-1 (lowest
    position among ties), every conf > threshold, and per segment every candidate at the
    segment's maximum when that maximum is > low_threshold; level 1's segments are the maximal
    runs of adjacent positions, each deeper level recurses into the pieces between the chosen."""
    conf = np.asarray(conf, dtype=np.float64)
    pos = np.asarray(pos)
    keep = np.zeros(conf.shape[0], dtype=bool)
    if not conf.size:
        return keep

    def descend(lo, hi, level):
        if lo >= hi or level > depth:
            return
        best = conf[lo:hi].max()
        if not best > low_threshold:
            return
        chosen = lo + np.nonzero(conf[lo:hi] == best)[0]
        keep[chosen] = True
        bounds = [lo - 1, *chosen.tolist(), hi]
        for a, b in zip(bounds[:-1], bounds[1:]):
            descend(a + 1, b, level + 1)

    breaks = (np.nonzero(np.diff(pos) != 1)[0] + 1).tolist()
    for lo, hi in zip([0, *breaks], [*breaks, conf.size]):
        descend(lo, hi, 1)
    keep |= conf > threshold
    keep[int(np.argmax(conf))] = True
    return keep


def credit_fused(rows, credits, masked, i, alpha, beta, gamma):
    """dInfer's credit decoding (CreditThresholdParallelDecoder; paper appendix B.2) on a block's
    logit rows: credits (block_length x V, zero at the block's start) decay by beta after the
    first step; each masked row adds (max p)^gamma at argmax p, p = softmax(row); returns
    float32(rows + alpha * log(1 + credits)).  Updates `credits` in place."""
    lg = np.asarray(rows, dtype=np.float64)
    if i > 0:
        credits *= beta
    p = softmax64(lg)
    top = p.argmax(axis=-1)
    for j in np.nonzero(masked)[0]:
        credits[j, top[j]] += p[j, top[j]] ** gamma
    return (lg + alpha * np.log1p(credits)).astype(np.float32)


class _Runner:
    """Runs model forwards, counts them, remembers the first forward's logits."""

    def __init__(self, model):
        self.model = model
        self.forwards = 0
        self.first_logits = None

    def full(self, seq, return_kv=False, embeds=None):
        out = self.model.forward(torch.as_tensor(np.asarray(seq), dtype=torch.long),
                                 return_kv=return_kv, embeds=embeds)
        logits, kv = (out if return_kv else (out, None))
        return self._done(logits), kv

    def cached(self, seq, keep, past, embeds=None):
        logits = self.model.forward(torch.as_tensor(np.asarray(seq[keep:]), dtype=torch.long),
                                    start=keep, past_kv=past, embeds=embeds)
        return self._done(logits)

    def window(self, seq, keep, end, cache):
        """seq[keep:end] over the K/V `cache` of all of seq (models.Model.forward_window)."""
        logits = self.model.forward_window(torch.as_tensor(np.asarray(seq[keep:end]),
                                                           dtype=torch.long), keep, cache)
        return self._done(logits)

    def _done(self, logits):
        self.forwards += 1
        logits = logits.numpy().astype(np.float32)
        if self.first_logits is None:
            self.first_logits = logits.copy()
        return logits


def _truncate_kv(kv, n):
    return [(k[:, :n].contiguous(), v[:, :n].contiguous()) for k, v in kv]


def _finish(prompt, x, eos, runner, t0, extra=None):
    out = [int(t) for t in x[len(prompt):]]
    if eos is not None and eos in out:
        out = out[: out.index(eos) + 1]
    res = {"prompt_ids": [int(t) for t in prompt], "output_ids": out,
           "forwards": runner.forwards, "seconds": time.time() - t0}
    if extra:
        res.update(extra)
    return res


def smoothed_embeddings(model, x, mask_id, last_logits, weight):
    """dInfer's H2Embed (IterationSmooth): E[x], and on the positions still masked E[mask] +
    weight * softmax(last_logits) @ E (float32; the vocabulary's rows of E). None: the first
    forward's plain E[x]."""
    embeds = model.embed[torch.as_tensor(x, dtype=torch.long)]
    if last_logits is None:
        return embeds
    logits = torch.as_tensor(last_logits)
    expected = torch.softmax(logits, dim=-1) @ model.embed[: logits.shape[1]]
    masked = torch.as_tensor(x == mask_id)[:, None]
    return torch.where(masked, weight * expected + embeds, embeds)


def low_confidence(model, prompt, gen_length=32, block_length=8, steps=16, threshold=None,
                   temperature=0.0, seed=0, request=0, cache="none", dump=False, step_cap=None,
                   low_threshold=None, depth=1, credit=False, credit_alpha=0.7, credit_beta=0.8,
                   credit_gamma=0.2, prefix_look=0, after_look=0, warmup_steps=0, smoothing=0.0,
                   smoothing_init=0.15, smoothing_growth=0.02, threshold_decay=0.02):
    prompt = [int(t) for t in prompt]
    mask_id = model.mask_token_id
    if mask_id is None:
        raise GenerateError("low-confidence needs a mask_token_id in config.json")
    if block_length <= 0 or gen_length <= 0 or gen_length % block_length:
        raise GenerateError(f"gen_length {gen_length} is not a positive multiple of "
                            f"block_length {block_length}")
    num_blocks = gen_length // block_length
    if steps <= 0 or steps % num_blocks:
        raise GenerateError(f"steps {steps} is not divisible by the number of blocks {num_blocks}")
    if cache not in ("none", "prefix", "dual"):
        raise GenerateError(f"unknown cache mode {cache!r}")
    if min(prefix_look, after_look, warmup_steps) < 0:
        raise GenerateError("prefix_look, after_look and warmup_steps must be >= 0")
    if (prefix_look or after_look or warmup_steps) and cache != "dual":
        raise GenerateError("prefix_look, after_look and warmup_steps refine the dual cache")
    if smoothing and cache == "dual":
        raise GenerateError("not supported yet: smoothing with the dual cache")
    spb = steps // num_blocks
    eos = model.eos_token_id
    shift = 1 if model.logit_shift else 0
    t0 = time.time()
    P = len(prompt)
    if P == 0:
        raise GenerateError("empty prompt")
    x = np.array(prompt + [mask_id] * gen_length, dtype=np.int64)
    runner = _Runner(model)
    step = 0
    # iteration smoothing's input embeddings, kept across steps as dInfer keeps them
    embeds = model.embed[torch.as_tensor(x, dtype=torch.long)] if smoothing else None
    for b in range(num_blocks):
        bs, be = P + b * block_length, P + (b + 1) * block_length
        schedule = num_transfer_tokens(int((x[bs:be] == mask_id).sum()), spb)
        credits = np.zeros((block_length, model.vocab_size)) if credit else None
        i = 0
        past = None
        keep = bs - shift
        while (x[bs:be] == mask_id).any():
            if smoothing and (cache == "none" or i == 0):
                logits, kv = runner.full(x, return_kv=(cache == "prefix"), embeds=embeds)
                if cache == "prefix":
                    past = _truncate_kv(kv, keep)
                rows, fed_from = logits[bs:be], 0
            elif smoothing:  # the prefix cache's later steps
                logits = runner.cached(x, keep, past, embeds=embeds[keep:])
                rows, fed_from = logits[bs - keep: be - keep], keep
            elif cache == "none" or i == 0 or (warmup_steps and step <= warmup_steps):
                logits, kv = runner.full(x, return_kv=(cache != "none"))
                rows = logits[bs:be]
                if cache == "prefix":
                    past = _truncate_kv(kv, keep)
                elif cache == "dual":
                    past = kv  # every position's, the later blocks' masks included
            elif cache == "prefix":
                logits = runner.cached(x, keep, past)
                rows = logits[bs - keep: be - keep]
            else:
                begin, end = max(0, min(keep, bs - prefix_look)), min(len(x), be + after_look)
                logits = runner.window(x, begin, end, past)
                rows = logits[bs - begin: be - begin]
            cand = np.nonzero(x[bs:be] == mask_id)[0]
            pos = bs + cand
            if credit:
                rows = credit_fused(rows, credits, x[bs:be] == mask_id, i, credit_alpha,
                                    credit_beta, credit_gamma)
            x0, conf = decode_rows(rows[cand], pos, temperature, seed, request, step, mask_id)
            order = top_k_order(conf, pos)
            high = 1.0 if threshold is None else threshold
            if smoothing:  # dInfer's iter_threshold
                high = max(1 - step * threshold_decay, high)
            if threshold is None and low_threshold is None:
                sel = order[:schedule[i] if i < len(schedule) else 1]
            elif step_cap is not None and i >= step_cap - 1:
                sel = order  # the explicit step cap: unmask everything left
            elif low_threshold is not None:
                sel = np.nonzero(hierarchical_accept(conf, pos, high, low_threshold, depth))[0]
            else:
                # `conf >= high` is a prefix of `order` since order sorts conf descending
                sel = order[:max(1, int((conf >= high).sum()))]
            x[pos[sel]] = x0[sel]
            if smoothing:  # dInfer's h2e over the fed positions, at this step's weight
                embeds[fed_from:] = smoothed_embeddings(
                    model, x[fed_from:], mask_id, logits,
                    min(smoothing_init + smoothing_growth * step, smoothing))
            i += 1
            step += 1
        if eos is not None and (x[bs:be] == eos).any():
            x[be:] = eos
            break
    return _finish(prompt, x, eos, runner, t0,
                   {"first_logits": runner.first_logits} if dump else None)


def entropy_bound(model, prompt, gen_length=32, block_length=8, max_steps=48, t_min=0.4,
                  t_max=0.8, bound=0.1, stability_threshold=1, confidence_threshold=0.005,
                  seed=0, request=0, cache="none", noise=None, dump=False):
    """DiffusionGemma entropy-bound canvas decoding (see the module docstring)."""
    prompt = [int(t) for t in prompt]
    if block_length <= 0 or gen_length <= 0 or gen_length % block_length:
        raise GenerateError(f"gen_length {gen_length} is not a positive multiple of "
                            f"block_length {block_length}")
    if max_steps <= 0:
        raise GenerateError("max_steps must be positive")
    if bound <= 0:
        raise GenerateError("entropy_bound must be > 0")
    if cache not in ("none", "prefix"):
        raise GenerateError(f"unknown cache mode {cache!r}")
    if not prompt:
        raise GenerateError("empty prompt")
    mask_id = model.mask_token_id
    if noise is None:
        noise = "mask" if mask_id is not None else "uniform"
    if noise == "mask" and mask_id is None:
        raise GenerateError("mask noise needs a mask_token_id in config.json")
    excl = mask_id if noise == "mask" else None
    V = model.vocab_size
    eos = model.eos_token_id
    shift = 1 if model.logit_shift else 0
    S = int(max_steps)
    C = int(block_length)
    t0 = time.time()
    runner = _Runner(model)
    seq = np.array(prompt, dtype=np.int64)
    step = 0
    for _c in range(gen_length // C):
        start = len(seq)
        positions = np.arange(start, start + C)
        if noise == "mask":
            canvas = np.full(C, mask_id, dtype=np.int64)
        else:
            canvas = rng.random_token(rng.keys(seed, request, rng.STREAM_INIT, step, positions), V)
        history = [np.full(C, -1, dtype=np.int64) for _ in range(stability_threshold)]
        past = None
        keep = start - shift
        if cache == "prefix":
            out, kv = runner.model.forward(torch.as_tensor(seq[:keep], dtype=torch.long),
                                           return_kv=True)
            runner.forwards += 1
            past = kv
        committed = None
        for n in range(S):
            T = t_min + (t_max - t_min) * (S - n) / S
            full = np.concatenate([seq, canvas])
            if cache == "none":
                logits, _ = runner.full(full)
                rows = logits[start:]
            else:
                logits = runner.cached(full, keep, past)
                rows = logits[start - keep:]
            z = rows.astype(np.float64) / T
            H = entropy64(z)
            g = rng.gumbel_vocab(rng.keys(seed, request, rng.STREAM_GUMBEL, step, positions), V)
            x_samp = _excluded(z + g, excl).argmax(axis=-1)
            x_arg = _excluded(z, excl).argmax(axis=-1)
            acc = entropy_accept(H, bound)
            stable = all(np.array_equal(h, x_arg) for h in history)
            confident = float(H.mean()) < confidence_threshold
            if (stable and confident) or n == S - 1:
                committed = x_arg.astype(np.int64)
                step += 1
                break
            if noise == "mask":
                renoise = np.full(C, mask_id, dtype=np.int64)
            else:
                renoise = rng.random_token(
                    rng.keys(seed, request, rng.STREAM_RENOISE, step, positions), V)
            canvas = np.where(acc, x_samp, renoise).astype(np.int64)
            if stability_threshold > 0:
                history = history[1:] + [x_arg.astype(np.int64)]
            step += 1
        seq = np.concatenate([seq, committed])
        if eos is not None and (committed == eos).any():
            break
    return _finish(prompt, seq, eos, runner, t0,
                   {"first_logits": runner.first_logits} if dump else None)
