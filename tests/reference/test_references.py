#!/usr/bin/env python3
"""Self-checks of the Python references (ctest: reference_selfcheck).

    python tests/reference/test_references.py [-v] [unittest args]

Generates the tiny checkpoints into a temporary directory with tests/models/make_tiny_models.py
(or uses $DLM_TINY_MODELS if set and already populated), then checks:
  * the reference forwards against Hugging Face classes (LLaDA == LlamaForCausalLM with a
    bidirectional mask after renaming, Dream == Qwen2ForCausalLM with a bidirectional mask plus
    the logit shift, Llama == LlamaForCausalLM); Qwen3 has no class in transformers 4.46, so it
    (and every other architecture) is checked against a second, loop-based float64 numpy
    implementation written separately in this file;
  * KV-cached and window (dual cache) forwards against full forwards, sharded == unsharded,
    padded columns dropped;
  * counter RNG known answers (the C++ runtime copies these);
  * sampler building blocks (num_transfer_tokens, entropy-bound accept incl. ties and the budget
    edge, confidence ordering, Gumbel decoding) and whole policies on hand-built fake models;
  * the generate.py CLI end to end.
"""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

try:
    import importlib
    for _mod in ("numpy", "torch", "transformers", "tokenizers", "safetensors"):
        importlib.import_module(_mod)
    import numpy as np  # noqa: E402
    import torch  # noqa: E402
except ImportError as _e:  # ctest treats 77 as "skipped"
    print(f"reference_selfcheck skipped: {_e} (set DLM_PYTHON to a Python with torch, "
          f"transformers, tokenizers, safetensors, numpy)", file=sys.stderr)
    sys.exit(77)

import counter_rng as rng  # noqa: E402
import models  # noqa: E402
import samplers  # noqa: E402

torch.set_num_threads(1)

MODELS_DIR = None
_TMP = None
REL_TOL = 1e-4
REPORT = {}


def setUpModule():
    global MODELS_DIR, _TMP
    env = os.environ.get("DLM_TINY_MODELS")
    if env and os.path.exists(os.path.join(env, "MANIFEST.json")):
        MODELS_DIR = env
        return
    _TMP = tempfile.mkdtemp(prefix="dlm_tiny_models_")
    MODELS_DIR = env or _TMP
    t0 = time.time()
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "models", "make_tiny_models.py"),
                    MODELS_DIR], check=True, stdout=subprocess.DEVNULL)
    REPORT["make_tiny_models seconds"] = round(time.time() - t0, 2)


def tearDownModule():
    if _TMP and os.path.isdir(_TMP):
        shutil.rmtree(_TMP, ignore_errors=True)
    if REPORT:
        print("\n" + json.dumps(REPORT, indent=1), file=sys.stderr)


def ckpt(name):
    return os.path.join(MODELS_DIR, name)


def rel_err(a, b):
    a = torch.as_tensor(a, dtype=torch.float64)
    b = torch.as_tensor(b, dtype=torch.float64)
    return float((a - b).abs().max() / b.abs().max())


def test_ids(n, vocab, seed=0):
    g = np.random.Generator(np.random.PCG64(seed))
    return torch.as_tensor(g.integers(0, vocab, size=n), dtype=torch.long)


# ---------------------------------------------------------------------------------------------
# Second implementation: explicit float64 numpy loops (per head, per query position)
# ---------------------------------------------------------------------------------------------

def numpy_forward(ckpt_dir, ids):
    cfg = models.load_config(ckpt_dir)
    t = {k: v.double().numpy() for k, v in models.load_tensors(ckpt_dir).items()}
    arch = cfg["architectures"][0]
    if arch == "LLaDAModelLM":
        d, nh, nkv, nl = cfg["d_model"], cfg["n_heads"], cfg["n_kv_heads"], cfg["n_layers"]
        hd, eps, theta, V = d // nh, cfg["rms_norm_eps"], cfg["rope_theta"], cfg["vocab_size"]
        E = t["model.transformer.wte.weight"]
        head = E if cfg["weight_tying"] else t["model.transformer.ff_out.weight"]
        fnorm = t["model.transformer.ln_f.weight"]
        causal, shift = False, False

        def L(i, r):
            return t[f"model.transformer.blocks.{i}.{r}.weight"]
        roles = dict(an="attn_norm", q="q_proj", k="k_proj", v="v_proj", o="attn_out",
                     fn="ff_norm", g="ff_proj", u="up_proj", dn="ff_out")
        get = lambda i, r: L(i, roles[r])  # noqa: E731
        getb = lambda i, r: None  # noqa: E731
        getn = lambda i, r: None  # noqa: E731
    else:
        d, nh = cfg["hidden_size"], cfg["num_attention_heads"]
        nkv, nl = cfg["num_key_value_heads"], cfg["num_hidden_layers"]
        hd = cfg.get("head_dim") or d // nh
        eps, theta, V = cfg["rms_norm_eps"], cfg["rope_theta"], cfg["vocab_size"]
        E = t["model.embed_tokens.weight"]
        head = E if cfg.get("tie_word_embeddings") else t["lm_head.weight"]
        fnorm = t["model.norm.weight"]
        causal, shift = arch != "DreamModel", arch == "DreamModel"
        roles = dict(an="input_layernorm", q="self_attn.q_proj", k="self_attn.k_proj",
                     v="self_attn.v_proj", o="self_attn.o_proj", fn="post_attention_layernorm",
                     g="mlp.gate_proj", u="mlp.up_proj", dn="mlp.down_proj")
        get = lambda i, r: t[f"model.layers.{i}.{roles[r]}.weight"]  # noqa: E731
        getb = lambda i, r: t.get(f"model.layers.{i}.{roles[r]}.bias")  # noqa: E731
        getn = lambda i, r: t.get(f"model.layers.{i}.self_attn.{r}_norm.weight")  # noqa: E731

    def rms(x, w):
        return x / np.sqrt(np.mean(x * x) + eps) * w

    def rope(vec, pos):
        out = np.empty_like(vec)
        half = hd // 2
        for j in range(half):
            ang = pos * theta ** (-2.0 * j / hd)
            c, s = math.cos(ang), math.sin(ang)
            a, b = vec[j], vec[j + half]
            out[j] = a * c - b * s
            out[j + half] = b * c + a * s
        return out

    ids = [int(i) for i in ids]
    n = len(ids)
    h = np.stack([E[i] for i in ids])
    for li in range(nl):
        x = np.stack([rms(h[p], get(li, "an")) for p in range(n)])
        q = x @ get(li, "q").T
        k = x @ get(li, "k").T
        v = x @ get(li, "v").T
        if getb(li, "q") is not None:
            q, k, v = q + getb(li, "q"), k + getb(li, "k"), v + getb(li, "v")
        attn = np.zeros((n, nh * hd))
        for hh in range(nh):
            kvh = hh // (nh // nkv)
            qs = [q[p, hh * hd:(hh + 1) * hd] for p in range(n)]
            ks = [k[p, kvh * hd:(kvh + 1) * hd] for p in range(n)]
            vs = [v[p, kvh * hd:(kvh + 1) * hd] for p in range(n)]
            if getn(li, "q") is not None:
                qs = [rms(a, getn(li, "q")) for a in qs]
                ks = [rms(a, getn(li, "k")) for a in ks]
            qs = [rope(a, p) for p, a in enumerate(qs)]
            ks = [rope(a, p) for p, a in enumerate(ks)]
            for p in range(n):
                keys = range(p + 1) if causal else range(n)
                sc = np.array([qs[p] @ ks[j] / math.sqrt(hd) for j in keys])
                w = np.exp(sc - sc.max())
                w /= w.sum()
                attn[p, hh * hd:(hh + 1) * hd] = sum(w[m] * vs[j] for m, j in enumerate(keys))
        h = h + attn @ get(li, "o").T
        x = np.stack([rms(h[p], get(li, "fn")) for p in range(n)])
        gt = x @ get(li, "g").T
        h = h + ((gt / (1 + np.exp(-gt))) * (x @ get(li, "u").T)) @ get(li, "dn").T
    h = np.stack([rms(h[p], fnorm) for p in range(n)])
    logits = (h @ head.T)[:, :V]
    if shift:
        logits = np.concatenate([logits[:1], logits[:-1]], axis=0)
    return logits


# ---------------------------------------------------------------------------------------------
# Hugging Face cross-checks
# ---------------------------------------------------------------------------------------------

LLADA_TO_LLAMA = {"attn_norm": "input_layernorm", "q_proj": "self_attn.q_proj",
                  "k_proj": "self_attn.k_proj", "v_proj": "self_attn.v_proj",
                  "attn_out": "self_attn.o_proj", "ff_norm": "post_attention_layernorm",
                  "ff_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj", "ff_out": "mlp.down_proj"}


def hf_llada(ckpt_dir):
    """LLaDA as transformers' LlamaForCausalLM (weights renamed; caller passes a 4D zero mask)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = models.load_config(ckpt_dir)
    t = models.load_tensors(ckpt_dir)
    hc = LlamaConfig(hidden_size=cfg["d_model"], intermediate_size=cfg["mlp_hidden_size"],
                     num_attention_heads=cfg["n_heads"], num_key_value_heads=cfg["n_kv_heads"],
                     num_hidden_layers=cfg["n_layers"], vocab_size=cfg["embedding_size"],
                     rms_norm_eps=cfg["rms_norm_eps"], rope_theta=cfg["rope_theta"],
                     max_position_embeddings=cfg["max_sequence_length"],
                     tie_word_embeddings=cfg["weight_tying"], attention_bias=False,
                     attn_implementation="eager")
    sd = {"model.embed_tokens.weight": t["model.transformer.wte.weight"],
          "model.norm.weight": t["model.transformer.ln_f.weight"]}
    if cfg["weight_tying"]:
        sd["lm_head.weight"] = t["model.transformer.wte.weight"]
    else:
        sd["lm_head.weight"] = t["model.transformer.ff_out.weight"]
    for k, v in t.items():
        if k.startswith("model.transformer.blocks."):
            _, _, _, i, role, _ = k.split(".")
            sd[f"model.layers.{i}.{LLADA_TO_LLAMA[role]}.weight"] = v
    m = LlamaForCausalLM(hc).eval()
    missing, unexpected = m.load_state_dict(sd, strict=False)
    assert not unexpected and all(k == "lm_head.weight" for k in missing), (missing, unexpected)
    return m, cfg["vocab_size"]


def hf_qwen2_or_llama(ckpt_dir, cls_name):
    import transformers
    cfg = models.load_config(ckpt_dir)
    t = models.load_tensors(ckpt_dir)
    if cls_name == "Qwen2ForCausalLM":
        hc = transformers.Qwen2Config(**{k: v for k, v in cfg.items()
                                         if k not in ("architectures", "model_type")})
    else:
        hc = transformers.LlamaConfig(**{k: v for k, v in cfg.items()
                                         if k not in ("architectures", "model_type")})
    hc._attn_implementation = "eager"
    m = getattr(transformers, cls_name)(hc).eval()
    missing, unexpected = m.load_state_dict(t, strict=False)
    assert not unexpected, unexpected
    assert all(k == "lm_head.weight" for k in missing) and (
        not missing or cfg.get("tie_word_embeddings")), missing
    return m, cfg["vocab_size"]


def hf_logits(m, ids, vocab, bidirectional, shift):
    ids = ids.reshape(1, -1)
    L = ids.shape[1]
    with torch.no_grad():
        if bidirectional:
            mask = torch.zeros(1, 1, L, L, dtype=torch.float32)
            out = m(input_ids=ids, attention_mask=mask).logits[0]
        else:
            out = m(input_ids=ids).logits[0]
    out = out[:, :vocab]
    if shift:
        out = torch.cat([out[:1], out[:-1]], dim=0)
    return out


class TestForward(unittest.TestCase):
    L = 24

    def _ref(self, name, ids=None):
        m = models.Model(ckpt(name))
        if ids is None:
            ids = test_ids(self.L, m.vocab_size, seed=len(name))
        return m, ids, m.forward(ids)

    def test_hf_llada(self):
        for name in ("llada", "llada_tied", "llada_sharded"):
            m, ids, ref = self._ref(name)
            self.assertEqual(ref.shape, (self.L, m.vocab_size))
            hf, V = hf_llada(ckpt(name))
            e = rel_err(ref, hf_logits(hf, ids, V, True, False))
            REPORT[f"hf rel err {name} (LlamaForCausalLM, bidirectional)"] = e
            self.assertLessEqual(e, REL_TOL, name)
            # the bidirectional mask matters: causal HF must disagree
            self.assertGreater(rel_err(ref, hf_logits(hf, ids, V, False, False)), 1e-2)

    def test_hf_dream(self):
        m, ids, ref = self._ref("dream")
        hf, V = hf_qwen2_or_llama(ckpt("dream"), "Qwen2ForCausalLM")
        e = rel_err(ref, hf_logits(hf, ids, V, True, True))
        REPORT["hf rel err dream (Qwen2ForCausalLM, bidirectional, shift)"] = e
        self.assertLessEqual(e, REL_TOL)
        self.assertTrue(torch.equal(ref[0], m.forward(ids, shift=False)[0]))
        self.assertTrue(torch.equal(ref[1:], m.forward(ids, shift=False)[:-1]))

    def test_hf_llama(self):
        m, ids, ref = self._ref("llama")
        hf, V = hf_qwen2_or_llama(ckpt("llama"), "LlamaForCausalLM")
        e = rel_err(ref, hf_logits(hf, ids, V, False, False))
        REPORT["hf rel err llama (LlamaForCausalLM, causal)"] = e
        self.assertLessEqual(e, REL_TOL)

    def test_numpy_second_implementation(self):
        for name in ("llada", "llada_tied", "dream", "qwen3", "llama"):
            m = models.Model(ckpt(name))
            ids = test_ids(12, m.vocab_size, seed=7)
            e = rel_err(m.forward(ids), numpy_forward(ckpt(name), ids))
            REPORT[f"numpy-f64 rel err {name}"] = e
            self.assertLessEqual(e, REL_TOL, name)

    def test_sharded_equals_unsharded(self):
        ids = test_ids(16, 512, seed=3)
        a = models.Model(ckpt("llada")).forward(ids)
        b = models.Model(ckpt("llada_sharded")).forward(ids)
        self.assertTrue(torch.equal(a, b))

    def test_padded_columns_dropped(self):
        m = models.Model(ckpt("llada"))
        self.assertGreater(m.spec.embedding_size, m.vocab_size)
        self.assertEqual(m.spec.embedding_size % 64, 0)
        self.assertEqual(m.forward(test_ids(5, m.vocab_size)).shape[1], m.vocab_size)

    def test_kv_cached_forward(self):
        for name in ("llada", "dream", "qwen3", "llama"):
            m = models.Model(ckpt(name))
            ids = test_ids(20, m.vocab_size, seed=11)
            full, kv = m.forward(ids, return_kv=True, shift=False)
            for P in (1, 7, 19):
                part = m.forward(ids[P:], start=P, past_kv=models.truncate_kv(kv, P), shift=False)
                e = rel_err(part, full[P:])
                self.assertLessEqual(e, 1e-5, (name, P))
            if m.logit_shift:  # Dream: feed from P-1 so the shifted row of P is exact
                fs = m.forward(ids)
                for P in (1, 7, 19):
                    part = m.forward(ids[P - 1:], start=P - 1,
                                     past_kv=models.truncate_kv(kv, P - 1))
                    self.assertLessEqual(rel_err(part[1:], fs[P:]), 1e-5, (name, P))
            if m.causal:  # a causal prefix's KV does not depend on what follows
                _, kvp = m.forward(ids[:9], return_kv=True)
                e = rel_err(m.forward(ids[9:], start=9, past_kv=kvp), full[9:])
                self.assertLessEqual(e, 1e-5, name)

    def test_window_forward(self):
        """A window over a cache of its own sequence is that sequence's full forward, whatever the
        cache holds at the window's positions (its own K/V replace them); the positions after it
        are read from the cache, which matters unless the model is causal."""
        for name in ("llada", "dream", "qwen3", "llama"):
            m = models.Model(ckpt(name))
            ids = test_ids(20, m.vocab_size, seed=13)
            full, kv = m.forward(ids, return_kv=True, shift=False)
            for P, E in ((0, 20), (5, 12), (19, 20), (0, 4)):
                part = m.forward_window(ids[P:E], P, kv, shift=False)
                self.assertLessEqual(rel_err(part, full[P:E]), 1e-5, (name, P, E))
            noise = torch.Generator().manual_seed(1)
            garbled = [(k.clone(), v.clone()) for k, v in kv]
            for k, v in garbled:
                k[:, 5:12] = torch.randn(k[:, 5:12].shape, generator=noise)
                v[:, 5:12] = torch.randn(v[:, 5:12].shape, generator=noise)
            self.assertLessEqual(
                rel_err(m.forward_window(ids[5:12], 5, garbled, shift=False), full[5:12]), 1e-5,
                name)
            stale = ids.clone()
            stale[14:] = (stale[14:] + 3) % m.vocab_size
            _, stale_kv = m.forward(stale, return_kv=True)
            e = rel_err(m.forward_window(ids[5:12], 5, stale_kv, shift=False), full[5:12])
            if m.causal:
                self.assertLessEqual(e, 1e-5, name)
            else:
                self.assertGreater(e, 1e-4, name)
            if m.logit_shift:  # Dream: feed from P-1 so the shifted row of P is exact
                fs = m.forward(ids)
                part = m.forward_window(ids[4:12], 4, kv)
                self.assertLessEqual(rel_err(part[1:], fs[5:12]), 1e-5, name)
        with self.assertRaises(ValueError):
            m.forward_window(ids[15:], 15, models.truncate_kv(kv, 18))

    def test_deterministic_generation(self):
        if _TMP is None:
            self.skipTest("models were not generated by this run")
        with tempfile.TemporaryDirectory() as td:
            subprocess.run([sys.executable, os.path.join(ROOT, "tests", "models",
                                                         "make_tiny_models.py"), td,
                            "--only", "llada,dream"], check=True, stdout=subprocess.DEVNULL)
            for name in ("llada", "dream"):
                for fn in sorted(os.listdir(os.path.join(td, name))):
                    with open(os.path.join(td, name, fn), "rb") as f1, \
                            open(os.path.join(ckpt(name), fn), "rb") as f2:
                        self.assertEqual(f1.read(), f2.read(), (name, fn))

    def test_unsupported(self):
        with self.assertRaises(models.UnsupportedArchitecture):
            models.Model(ckpt("llada_moe"))

    def test_manifest(self):
        with open(os.path.join(MODELS_DIR, "MANIFEST.json")) as f:
            man = json.load(f)["models"]
        for name in ("llada", "llada_tied", "llada_sharded", "dream", "qwen3", "llama",
                     "llada_moe"):
            self.assertIn(name, man)
            for fn in man[name]["files"]:
                self.assertTrue(os.path.exists(os.path.join(ckpt(name), fn)), (name, fn))
        self.assertEqual(man["llada"]["dtype"], "bfloat16")
        self.assertTrue(man["llada_sharded"]["sharded"])


# ---------------------------------------------------------------------------------------------
# Counter RNG
# ---------------------------------------------------------------------------------------------

class TestRng(unittest.TestCase):
    def test_known_answers(self):
        self.assertEqual(rng.mix64(0), 0xE220A8397B1DCDAF)  # SplitMix64's first output, seed 0
        self.assertEqual(rng.key(0, 0, 0, 0, 0), 0x78AE5A9A6B5FD45E)
        self.assertEqual(rng.key(1, 2, 0, 3, 4), 0x319095646F29ED17)
        self.assertEqual(rng.key(42, 7, 1, 5, 100), 0x2BD2928089FE1D5F)
        k0 = rng.key(0, 0, 0, 0, 0)
        u = rng.uniform(k0, np.arange(4))
        np.testing.assert_array_equal(
            u, [0.7961956752947816, 0.11112257838554035, 0.4328746129317837, 0.7810997456973221])
        g = rng.gumbel(k0, np.arange(4))
        np.testing.assert_allclose(g, [1.4788031479962698, -0.7871480386637149,
                                       0.17756428604386276, 1.398154730314527], rtol=1e-15)
        self.assertEqual(rng.random_token(rng.key(0, 0, 1, 0, 0), 512), 154)
        self.assertEqual(rng.random_token(rng.key(0, 0, 2, 0, 5), 512), 294)
        REPORT["rng known answers"] = {k: (hex(v) if isinstance(v, int) else v)
                                       for k, v in rng.known_answers().items()}

    def test_vectorised_matches_scalar(self):
        pos = np.array([0, 1, 5, 99, 2**40])
        ks = rng.keys(3, 1, 0, 17, pos)
        for i, p in enumerate(pos):
            self.assertEqual(int(ks[i]), rng.key(3, 1, 0, 17, int(p)))
        gv = rng.gumbel_vocab(ks, 512)
        self.assertEqual(gv.shape, (5, 512))
        for i in range(5):
            for v in (0, 1, 511):
                self.assertEqual(gv[i, v], rng.gumbel(int(ks[i]), v))
        toks = rng.random_token(ks, 512)
        for i in range(5):
            self.assertEqual(int(toks[i]), rng.random_token(int(ks[i]), 512))

    def test_range_and_speed(self):
        t0 = time.time()
        u = rng.uniform_vocab(rng.keys(0, 0, 0, 0, np.arange(100)), 512)
        self.assertLess(time.time() - t0, 0.5)
        self.assertTrue((u > 0).all() and (u < 1).all())
        self.assertAlmostEqual(float(u.mean()), 0.5, delta=0.01)
        # edge values of the 53-bit mapping, in IEEE double as the C++ side computes them:
        # ((double)(m >> 11) + 0.5) * 0x1p-53.  The bottom is 2^-54; at the top the + 0.5 is
        # rounded (ties to even) and gives exactly 1.0 (then gumbel = +inf) for 1 draw in 2^53.
        self.assertEqual(rng._bits_to_uniform(np.array([0], dtype=np.uint64))[0], 2.0 ** -54)
        self.assertEqual(rng._bits_to_uniform(np.array([2**64 - 1], dtype=np.uint64))[0], 1.0)
        self.assertEqual(rng._bits_to_uniform(np.array([(2**53 - 2) << 11], dtype=np.uint64))[0],
                         1.0 - 2.0 ** -52)  # 2^53 - 1.5 rounds to 2^53 - 2


# ---------------------------------------------------------------------------------------------
# Samplers
# ---------------------------------------------------------------------------------------------

class FakeModel:
    """Logits chosen per (position, current token) by a Python function; counts forwards."""

    def __init__(self, fn, vocab=16, mask=15, eos=14, shift=False, causal=False):
        self.fn = fn
        self.vocab_size = vocab
        self.mask_token_id = mask
        self.eos_token_id = eos
        self.logit_shift = shift
        self.causal = causal
        self.calls = []
        self.windows = []  # (start, ids, cached positions) of each window forward
        self.embeds = []  # the input embeddings of each forward (None: the ids')
        self.embed = torch.arange(vocab * 2, dtype=torch.float32).reshape(vocab, 2) / vocab

    def forward_window(self, ids, start, cache_kv, shift=None):
        ids = [int(i) for i in ids]
        self.windows.append((start, list(ids), cache_kv[0][0].shape[1]))
        return self.forward(ids, start)

    def forward(self, ids, start=0, past_kv=None, return_kv=False, shift=None, embeds=None):
        ids = [int(i) for i in ids]
        self.calls.append((start, list(ids)))
        self.embeds.append(None if embeds is None else embeds.clone())
        rows = [self.fn(start + j, ids, start) for j in range(len(ids))]
        out = torch.tensor(np.array(rows, dtype=np.float32))
        if return_kv:
            kv = [(torch.zeros(1, start + len(ids), 1), torch.zeros(1, start + len(ids), 1))]
            return out, kv
        return out


def peaked(tok, conf_logit, vocab=16):
    row = np.zeros(vocab)
    row[tok] = conf_logit
    return row


class TestSamplerParts(unittest.TestCase):
    def test_num_transfer_tokens(self):
        self.assertEqual(samplers.num_transfer_tokens(8, 3), [3, 3, 2])
        self.assertEqual(samplers.num_transfer_tokens(8, 4), [2, 2, 2, 2])
        self.assertEqual(samplers.num_transfer_tokens(2, 4), [1, 1, 0, 0])
        self.assertEqual(samplers.num_transfer_tokens(0, 2), [0, 0])
        self.assertEqual(samplers.num_transfer_tokens(7, 1), [7])

    def test_entropy_accept(self):
        ea = samplers.entropy_accept
        # order 1(.02) 2(.04) 0(.05) 3(.5): sums before = 0, .02, .06, .11
        self.assertEqual(list(ea([0.05, 0.02, 0.04, 0.5], 0.1)), [True, True, True, False])
        # budget edge (binary fractions, exact): sum before position 1 is exactly the bound
        self.assertEqual(list(ea([0.25, 0.5, 0.25, 1.0], 0.5)), [True, True, True, False])
        self.assertEqual(list(ea([0.25, 0.5, 0.25, 1.0], 0.4999)), [True, False, True, False])
        # ties -> lower position first: the budget admits two of three equal entropies
        self.assertEqual(list(ea([0.25, 0.25, 0.25], 0.3)), [True, True, False])
        self.assertEqual(list(ea([0.5, 0.25, 0.25], 0.25)), [False, True, True])
        self.assertEqual(list(ea([0.375, 0.375, 0.375], 0.375)), [True, True, False])
        # the lowest is always accepted, even far above the bound
        self.assertEqual(list(ea([2.0, 3.0], 0.1)), [True, False])
        self.assertEqual(list(ea([3.0, 2.0, 2.0], 0.1)), [False, True, False])
        # all zero entropy: everything accepted
        self.assertTrue(ea(np.zeros(5), 0.1).all())

    def test_confidence_order_ties(self):
        order = samplers.top_k_order([0.5, 0.9, 0.5, 0.9], [10, 11, 12, 13])
        self.assertEqual(list(order), [1, 3, 0, 2])

    def test_entropy(self):
        self.assertAlmostEqual(float(samplers.entropy64(np.zeros((1, 4)))[0]), math.log(4))
        self.assertAlmostEqual(float(samplers.entropy64(np.array([[0.0, -np.inf]]))[0]), 0.0)

    def test_decode_rows(self):
        lg = np.array([[0.0, 3.0, 1.0, 5.0], [2.0, 1.0, 0.0, -1.0]])
        # mask id 3 excluded from argmax, but included in the softmax
        x0, conf = samplers.decode_rows(lg, [7, 8], 0.0, 0, 0, 0, mask_id=3)
        self.assertEqual(list(x0), [1, 0])
        p0 = np.exp(lg[0]) / np.exp(lg[0]).sum()
        self.assertAlmostEqual(conf[0], p0[1], places=15)
        # T > 0: argmax(logits + T * gumbel(key(seed, request, 0, step, pos), v))
        T, seed, req, step = 0.7, 5, 2, 9
        x0, _ = samplers.decode_rows(lg, [7, 8], T, seed, req, step, mask_id=None)
        for r, pos in enumerate([7, 8]):
            k = rng.key(seed, req, 0, step, pos)
            noisy = [lg[r, v] + T * rng.gumbel(k, v) for v in range(4)]
            self.assertEqual(int(x0[r]), int(np.argmax(noisy)))

    def test_hierarchical_accept(self):
        ha = samplers.hierarchical_accept
        # runs 10-12 (max .6 at 11), 14-15 (max .5 at 15), 17 (.3): depth 1 = dInfer's code
        pos, conf = [10, 11, 12, 14, 15, 17], [0.2, 0.6, 0.55, 0.1, 0.5, 0.3]
        self.assertEqual(ha(conf, pos, 0.9, 0.4, 1).tolist(), [0, 1, 0, 0, 1, 0])
        self.assertEqual(ha(conf, pos, 0.9, 0.5, 1).tolist(), [0, 1, 0, 0, 0, 0])  # strict low
        self.assertEqual(ha(conf, pos, 0.55, 0.9, 1).tolist(), [0, 1, 0, 0, 0, 0])  # strict high
        self.assertEqual(ha(conf, pos, 0.54, 0.9, 1).tolist(), [0, 1, 1, 0, 0, 0])
        # top-1 always (ties to the lower position); every tied run maximum
        self.assertEqual(ha([0.2, 0.3, 0.3], [0, 1, 2], 1.0, 0.9, 1).tolist(), [0, 1, 0])
        self.assertEqual(ha([0.5, 0.2, 0.5], [0, 1, 2], 1.0, 0.4, 1).tolist(), [1, 0, 1])
        # the paper's recursion: each level splits its segments at the positions it chose
        pos, conf = list(range(7)), [0.5, 0.7, 0.3, 0.9, 0.2, 0.8, 0.6]
        self.assertEqual(ha(conf, pos, 1.0, 0.4, 1).tolist(), [0, 0, 0, 1, 0, 0, 0])
        self.assertEqual(ha(conf, pos, 1.0, 0.4, 2).tolist(), [0, 1, 0, 1, 0, 1, 0])
        self.assertEqual(ha(conf, pos, 1.0, 0.4, 3).tolist(), [1, 1, 0, 1, 0, 1, 1])
        self.assertEqual(ha(conf, pos, 1.0, 0.75, 3).tolist(), [0, 0, 0, 1, 0, 1, 0])
        self.assertEqual(ha([], [], 1.0, 0.4, 1).tolist(), [])

    def test_credit_fused(self):
        # p = softmax {0, log 3} = {.25, .75}: the argmax gains .75^gamma, decayed by beta later
        rows = np.array([[0.0, math.log(3.0)], [0.0, 0.0]], dtype=np.float32)
        credits = np.zeros((2, 2))
        fused = samplers.credit_fused(rows, credits, np.array([True, False]), 0, 0.5, 0.8, 0.5)
        self.assertAlmostEqual(credits[0, 1], math.sqrt(0.75), places=6)
        self.assertEqual(credits[1].tolist(), [0.0, 0.0])  # not masked: no credit
        self.assertEqual(fused.dtype, np.float32)
        self.assertAlmostEqual(float(fused[0, 1]),
                               math.log(3.0) + 0.5 * math.log1p(math.sqrt(0.75)), places=5)
        samplers.credit_fused(rows, credits, np.array([True, False]), 1, 0.5, 0.8, 0.5)
        self.assertAlmostEqual(credits[0, 1], 1.8 * math.sqrt(0.75), places=6)


def order_model(conf_by_pos, tok_by_pos, vocab=16):
    """Fake model: position p predicts tok_by_pos[p] with logit conf_by_pos[p]."""
    def fn(pos, ids, start):
        return peaked(tok_by_pos.get(pos, 0), conf_by_pos.get(pos, 1.0), vocab)
    return fn


class TestLowConfidence(unittest.TestCase):
    def test_fixed_schedule_order(self):
        # prompt 2 tokens, one block of 4 in 2 steps: k = [2, 2]; most confident first
        conf = {2: 1.0, 3: 4.0, 4: 2.0, 5: 4.0}
        tok = {2: 5, 3: 6, 4: 7, 5: 8}
        fm = FakeModel(order_model(conf, tok))
        res = samplers.low_confidence(fm, [1, 2], gen_length=4, block_length=4, steps=2)
        self.assertEqual(res["output_ids"], [5, 6, 7, 8])
        self.assertEqual(res["forwards"], 2)
        # after the first forward positions 3 and 5 (tie -> both, equal conf) are unmasked
        self.assertEqual(fm.calls[1][1], [1, 2, 15, 6, 15, 8])

    def test_tie_prefers_lower_position(self):
        conf = {2: 3.0, 3: 3.0, 4: 3.0}
        tok = {2: 5, 3: 6, 4: 7}
        fm = FakeModel(order_model(conf, tok))
        samplers.low_confidence(fm, [1, 2], gen_length=3, block_length=3, steps=3)
        self.assertEqual(fm.calls[1][1], [1, 2, 5, 15, 15])
        self.assertEqual(fm.calls[2][1], [1, 2, 5, 6, 15])

    def test_blocks_and_global_steps(self):
        # 2 blocks of 2, 4 steps -> 2 per block; candidates limited to the current block
        conf = {1: 1.0, 2: 2.0, 3: 9.0, 4: 9.0}
        tok = {1: 3, 2: 4, 3: 5, 4: 6}
        fm = FakeModel(order_model(conf, tok))
        res = samplers.low_confidence(fm, [0], gen_length=4, block_length=2, steps=4)
        self.assertEqual(res["output_ids"], [3, 4, 5, 6])
        self.assertEqual(res["forwards"], 4)
        self.assertEqual(fm.calls[1][1], [0, 15, 4, 15, 15])   # block 0: pos 2 first
        self.assertEqual(fm.calls[2][1], [0, 3, 4, 15, 15])

    def test_mask_never_decoded(self):
        fm = FakeModel(lambda pos, ids, s: peaked(15, 9.0) + peaked(4, 1.0))
        res = samplers.low_confidence(fm, [0], gen_length=2, block_length=2, steps=2)
        self.assertEqual(res["output_ids"], [4, 4])

    def test_threshold(self):
        # probs: peaked(t, c) over 16 tokens -> p = e^c / (e^c + 15)
        conf = {1: 8.0, 2: 0.5, 3: 8.0, 4: 1.0}
        tok = {1: 3, 2: 4, 3: 5, 4: 6}
        fm = FakeModel(order_model(conf, tok))
        res = samplers.low_confidence(fm, [0], gen_length=4, block_length=4, steps=4,
                                      threshold=0.9)
        self.assertEqual(res["output_ids"], [3, 4, 5, 6])
        # step 1: 1 and 3 (p>0.99); step 2: only top-1 (pos 4, conf 1.0 > 0.5); step 3: pos 2
        self.assertEqual(res["forwards"], 3)
        self.assertEqual(fm.calls[1][1], [0, 3, 15, 5, 15])
        self.assertEqual(fm.calls[2][1], [0, 3, 15, 5, 6])

    def test_threshold_ignores_steps(self):
        # Fast-dLLM's threshold: steps=2 does not cap the block; one position per step here.
        conf = {1: 0.1, 2: 0.2, 3: 0.3, 4: 0.4}
        tok = {1: 3, 2: 4, 3: 5, 4: 6}
        fm = FakeModel(order_model(conf, tok))
        res = samplers.low_confidence(fm, [0], gen_length=4, block_length=4, steps=2,
                                      threshold=0.9)
        self.assertEqual(res["forwards"], 4)
        self.assertEqual(res["output_ids"], [3, 4, 5, 6])

    def test_threshold_step_cap(self):
        conf = {1: 0.1, 2: 0.2, 3: 0.3, 4: 0.4}
        tok = {1: 3, 2: 4, 3: 5, 4: 6}
        fm = FakeModel(order_model(conf, tok))
        res = samplers.low_confidence(fm, [0], gen_length=4, block_length=4, steps=4,
                                      threshold=0.9, step_cap=2)
        self.assertEqual(res["forwards"], 2)  # top-1, then the cap unmasks the other three
        self.assertEqual(res["output_ids"], [3, 4, 5, 6])
        self.assertEqual(fm.calls[1][1], [0, 15, 15, 15, 6])

    def test_early_stop_at_eos(self):
        conf = {1: 5.0, 2: 5.0, 3: 5.0, 4: 5.0}
        tok = {1: 3, 2: 14, 3: 5, 4: 6}
        fm = FakeModel(order_model(conf, tok))
        res = samplers.low_confidence(fm, [0], gen_length=6, block_length=2, steps=3)
        self.assertEqual(res["output_ids"], [3, 14])
        self.assertEqual(res["forwards"], 1)

    def test_errors(self):
        fm = FakeModel(order_model({}, {}))
        with self.assertRaises(samplers.GenerateError):
            samplers.low_confidence(fm, [0], gen_length=10, block_length=4, steps=4)
        with self.assertRaises(samplers.GenerateError):
            samplers.low_confidence(fm, [0], gen_length=8, block_length=4, steps=3)

    def test_prefix_cache_feeds(self):
        conf = {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}
        tok = {1: 3, 2: 4, 3: 5, 4: 6}
        fm = FakeModel(order_model(conf, tok))
        samplers.low_confidence(fm, [0], gen_length=4, block_length=2, steps=4, cache="prefix")
        starts = [c[0] for c in fm.calls]
        lens = [len(c[1]) for c in fm.calls]
        self.assertEqual(starts, [0, 1, 0, 3])
        self.assertEqual(lens, [5, 4, 5, 2])
        fm = FakeModel(order_model(conf, tok), shift=True)  # Dream: one position earlier
        samplers.low_confidence(fm, [0, 0], gen_length=4, block_length=2, steps=4,
                                cache="prefix")
        self.assertEqual([c[0] for c in fm.calls], [0, 1, 0, 3])


    def test_dual_cache_feeds(self):
        conf = {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}
        tok = {1: 3, 2: 4, 3: 5, 4: 6}
        fm = FakeModel(order_model(conf, tok))
        res = samplers.low_confidence(fm, [0], gen_length=4, block_length=2, steps=4,
                                      cache="dual")
        self.assertEqual(res["output_ids"], [3, 4, 5, 6])
        self.assertEqual(res["forwards"], 4)
        self.assertEqual([(c[0], len(c[1])) for c in fm.calls], [(0, 5), (1, 2), (0, 5), (3, 2)])
        # the windows read a cache of every position
        self.assertEqual(fm.windows, [(1, [15, 4], 5), (3, [15, 6], 5)])
        fm = FakeModel(order_model(conf, tok), shift=True)  # Dream: one position earlier
        samplers.low_confidence(fm, [0, 0], gen_length=4, block_length=2, steps=4, cache="dual")
        self.assertEqual([(w[0], len(w[1])) for w in fm.windows], [(1, 3), (3, 3)])
        with self.assertRaises(samplers.GenerateError):
            samplers.entropy_bound(fm, [0], gen_length=2, block_length=2, cache="dual")

    def test_vicinity_feeds(self):
        conf = {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0, 5: 5.0, 6: 6.0}
        tok = {1: 3, 2: 4, 3: 5, 4: 6, 5: 7, 6: 8}
        fm = FakeModel(order_model(conf, tok))
        res = samplers.low_confidence(fm, [0], gen_length=6, block_length=2, steps=6,
                                      cache="dual", prefix_look=1, after_look=3)
        self.assertEqual(res["output_ids"], [3, 4, 5, 6, 7, 8])
        # windows [keep - 1, block end + 3) clipped to [0, 7)
        self.assertEqual([(w[0], len(w[1])) for w in fm.windows], [(0, 6), (2, 5), (4, 3)])
        # warmup 2: steps 0, 1 and 2 are full forwards (the third builds the cache), then each
        # block's first
        fm = FakeModel(order_model(conf, tok))
        samplers.low_confidence(fm, [0], gen_length=6, block_length=3, steps=6, cache="dual",
                                warmup_steps=2)
        self.assertEqual([len(c[1]) for c in fm.calls], [7, 7, 7, 7, 3, 3])
        # Dream's shifted row: the window starts at keep = block start - 1 at least, else
        # prefix_look before the block
        fm = FakeModel(order_model(conf, tok), shift=True)
        samplers.low_confidence(fm, [0, 0], gen_length=4, block_length=2, steps=4, cache="dual",
                                prefix_look=1)
        self.assertEqual([w[0] for w in fm.windows], [1, 3])
        fm = FakeModel(order_model(conf, tok), shift=True)
        samplers.low_confidence(fm, [0, 0], gen_length=4, block_length=2, steps=4, cache="dual",
                                prefix_look=2)
        self.assertEqual([w[0] for w in fm.windows], [0, 2])
        with self.assertRaises(samplers.GenerateError):
            samplers.low_confidence(fm, [0], gen_length=2, block_length=2, steps=2,
                                    cache="prefix", after_look=1)

    def test_smoothed_embeddings(self):
        class Table:
            embed = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])  # token 2: the mask
        x = np.array([0, 2, 1])
        last = np.array([[5, 0, 0], [0, math.log(3), -math.inf], [0, 0, 9]], dtype=np.float32)
        self.assertTrue(torch.equal(samplers.smoothed_embeddings(Table, x, 2, None, 0.5),
                                    Table.embed[[0, 2, 1]]))
        # softmax([0, log 3, -inf]) = [1/4, 3/4, 0]: E[2] + 0.5 * [0.25, 0.75]; others E[x]
        got = samplers.smoothed_embeddings(Table, x, 2, last, 0.5)
        self.assertTrue(torch.allclose(got, torch.tensor([[1.0, 0.0], [2.125, 2.375],
                                                          [0.0, 1.0]])))

    def test_smoothing_inputs_and_threshold(self):
        # Every masked position's top token at probability 0.7 (e^L = 35 against 15 ones).
        tokens = {1: 3, 2: 4, 3: 5, 4: 6}
        fm = FakeModel(lambda pos, ids, s: peaked(tokens.get(pos, 0), math.log(35.0)))
        plain = samplers.low_confidence(fm, [0], gen_length=4, block_length=4, steps=4,
                                        threshold=0.5)
        self.assertEqual(plain["forwards"], 1)  # 0.7 >= 0.5 everywhere
        fm = FakeModel(lambda pos, ids, s: peaked(tokens.get(pos, 0), math.log(35.0)))
        res = samplers.low_confidence(fm, [0], gen_length=4, block_length=4, steps=4,
                                      threshold=0.5, smoothing=0.3)
        self.assertEqual(res["output_ids"], [3, 4, 5, 6])
        # step j's threshold max(1 - 0.02 j, 0.5) > 0.7 for j < 15: one token a step
        self.assertEqual(res["forwards"], 4)
        first_ids = torch.as_tensor(fm.calls[0][1])
        self.assertTrue(torch.equal(fm.embeds[0], fm.embed[first_ids]))
        # step 1: the three masked positions add w_0 = 0.15 times their expected embedding
        ids = torch.as_tensor(fm.calls[1][1])
        probs = torch.softmax(torch.tensor(np.array(
            [peaked(tokens.get(p, 0), math.log(35.0)) for p in range(5)], dtype=np.float32)), -1)
        want = fm.embed[ids] + (ids == 15)[:, None] * (0.15 * (probs @ fm.embed[:16]))
        self.assertTrue(torch.allclose(fm.embeds[1], want))
        self.assertEqual(int((ids == 15).sum()), 3)
        with self.assertRaises(samplers.GenerateError):
            samplers.low_confidence(fm, [0], gen_length=4, block_length=4, steps=4,
                                    cache="dual", smoothing=0.3)
        # the prefix cache: a block's later steps feed x[keep:] with its kept embeddings, which
        # its first (full) step's logits set
        fm = FakeModel(lambda pos, ids, s: peaked(tokens.get(pos, 0), math.log(35.0)))
        res = samplers.low_confidence(fm, [0], gen_length=4, block_length=4, steps=4,
                                      threshold=0.5, smoothing=0.3, cache="prefix")
        self.assertEqual(res["output_ids"], [3, 4, 5, 6])
        self.assertEqual([c[0] for c in fm.calls], [0, 1, 1, 1])
        self.assertTrue(torch.allclose(fm.embeds[1], want[1:]))


class TestEntropyBound(unittest.TestCase):
    def test_converges_after_stability(self):
        # Very peaked fixed predictions: mean H ~ 0 -> converged once argmax is stable (2 steps)
        fm = FakeModel(lambda pos, ids, s: peaked(pos % 10, 60.0))
        res = samplers.entropy_bound(fm, [0], gen_length=8, block_length=4)
        self.assertEqual(res["output_ids"], [1, 2, 3, 4, 5, 6, 7, 8])
        self.assertEqual(res["forwards"], 4)
        res0 = samplers.entropy_bound(fm, [0], gen_length=4, block_length=4,
                                      stability_threshold=0)
        self.assertEqual(res0["forwards"], 1)
        res2 = samplers.entropy_bound(fm, [0], gen_length=4, block_length=4,
                                      stability_threshold=2)
        self.assertEqual(res2["forwards"], 3)

    def test_step_cap_and_renoise(self):
        # Flat logits never converge: S forwards per canvas; rejected positions get the mask back
        fm = FakeModel(lambda pos, ids, s: np.zeros(16))
        res = samplers.entropy_bound(fm, [0], gen_length=4, block_length=4, max_steps=5)
        self.assertEqual(res["forwards"], 5)
        self.assertNotIn(15, res["output_ids"])
        canv = np.array(fm.calls[1][1][1:])
        # H = log 16 each: only the lowest (position 1, tie -> lowest) is accepted
        self.assertEqual(int((canv != 15).sum()), 1)
        self.assertNotEqual(int(canv[0]), 15)
        # the accepted token is x_samp = argmax(z + gumbel(key(0, 0, 0, 0, 1)))
        k = rng.key(0, 0, 0, 0, 1)
        self.assertEqual(int(canv[0]),
                         int(np.argmax([rng.gumbel(k, v) if v != 15 else -np.inf
                                        for v in range(16)])))

    def test_temperature_schedule(self):
        seen = []

        def fn(pos, ids, s):
            return np.linspace(0.0, 1.0, 16)
        fm = FakeModel(fn)
        orig = samplers.entropy64

        def spy(z):
            seen.append(float(z[0, 1] - z[0, 0]))
            return orig(z)
        samplers.entropy64 = spy
        try:
            samplers.entropy_bound(fm, [0], gen_length=2, block_length=2, max_steps=4)
        finally:
            samplers.entropy64 = orig
        step = 1.0 / 15
        temps = [step / d for d in seen]
        np.testing.assert_allclose(temps, [0.8, 0.7, 0.6, 0.5], rtol=1e-6)  # f32 logits

    def test_uniform_noise_streams(self):
        fm = FakeModel(lambda pos, ids, s: np.zeros(16), mask=None)
        samplers.entropy_bound(fm, [0, 0, 0], gen_length=2, block_length=2, max_steps=3, seed=9,
                               request=4)
        init = fm.calls[0][1][3:]
        self.assertEqual(init, [rng.random_token(rng.key(9, 4, 2, 0, p), 16) for p in (3, 4)])
        second = fm.calls[1][1][3:]
        # position 3 accepted (tie), position 4 renoised with stream 1 at step 0
        self.assertEqual(second[1], rng.random_token(rng.key(9, 4, 1, 0, 4), 16))

    def test_early_stop(self):
        fm = FakeModel(lambda pos, ids, s: peaked(14 if pos == 2 else 3, 60.0))
        res = samplers.entropy_bound(fm, [0], gen_length=6, block_length=2)
        self.assertEqual(res["output_ids"], [3, 14])
        self.assertEqual(res["forwards"], 2)


class TestGenerateOnTinyModels(unittest.TestCase):
    def test_policies_run(self):
        m = models.Model(ckpt("llada"))
        prompt = [5, 6, 7, 8]
        a = samplers.low_confidence(m, prompt, 16, 8, 8)
        self.assertEqual(a["forwards"], 8)
        self.assertTrue(all(0 <= t < m.vocab_size and t != m.mask_token_id
                            for t in a["output_ids"]))
        b = samplers.low_confidence(m, prompt, 16, 8, 8, cache="prefix")
        self.assertEqual(b["forwards"], 8)
        c = samplers.low_confidence(m, prompt, 16, 8, 8, temperature=1.0, seed=1)
        c2 = samplers.low_confidence(m, prompt, 16, 8, 8, temperature=1.0, seed=1)
        self.assertEqual(c["output_ids"], c2["output_ids"])
        e = samplers.entropy_bound(m, prompt, 8, 8, max_steps=6)
        self.assertLessEqual(e["forwards"], 6)

    def test_causal_prefix_cache_is_exact(self):
        m = models.Model(ckpt("llama"))
        a = samplers.low_confidence(m, [1, 2, 3], 16, 4, 16)
        b = samplers.low_confidence(m, [1, 2, 3], 16, 4, 16, cache="prefix")
        self.assertEqual(a["output_ids"], b["output_ids"])
        c = samplers.low_confidence(m, [1, 2, 3], 16, 4, 16, cache="dual")
        self.assertEqual(a["output_ids"], c["output_ids"])

    def test_dual_cache(self):
        """The caches differ only after a block's first step: its logits are one full forward."""
        for name in ("llada", "dream"):
            m = models.Model(ckpt(name))
            runs = {cache: samplers.low_confidence(m, [5, 6, 7, 8], 16, 8, 8, cache=cache,
                                                   dump=True)
                    for cache in ("none", "prefix", "dual")}
            for cache in ("prefix", "dual"):
                self.assertEqual(runs[cache]["forwards"], 8, (name, cache))
                np.testing.assert_array_equal(runs[cache]["first_logits"],
                                              runs["none"]["first_logits"])
            self.assertTrue(all(0 <= t < m.vocab_size and t != m.mask_token_id
                                for t in runs["dual"]["output_ids"]))

    def test_demo_checkpoint(self):
        demo = os.path.join(ROOT, "tests", "models", "demo", "checkpoint")
        log_path = os.path.join(demo, "training_log.json")
        if not os.path.exists(log_path):
            self.skipTest("no demo checkpoint")
        with open(log_path) as f:
            sample = json.load(f)["samples"][0]
        m = models.Model(demo)
        r = samplers.low_confidence(m, sample["prompt_ids"], gen_length=32, block_length=4,
                                    steps=32)
        self.assertEqual(r["output_ids"], sample["output_ids"])

    def test_cli(self):
        gen = os.path.join(HERE, "generate.py")
        with tempfile.TemporaryDirectory() as td:
            dump = os.path.join(td, "first.npy")
            out = subprocess.run([sys.executable, gen, ckpt("llada"), "--prompt", "hello world",
                                  "--gen-length", "8", "--block-length", "4", "--steps", "4",
                                  "--json", "--dump-logits", dump],
                                 check=True, capture_output=True, text=True).stdout
            r = json.loads(out)
            self.assertEqual(set(r), {"prompt_ids", "output_ids", "forwards", "text", "seconds"})
            self.assertEqual(r["forwards"], 4)
            lg = np.load(dump)
            m = models.Model(ckpt("llada"))
            self.assertEqual(lg.shape, (len(r["prompt_ids"]) + 8, m.vocab_size))
            ref = m.forward(r["prompt_ids"] + [m.mask_token_id] * 8).numpy()
            np.testing.assert_array_equal(lg, ref)
            bad = subprocess.run([sys.executable, gen, ckpt("llada"), "--prompt-ids", "1,2",
                                  "--gen-length", "10", "--block-length", "4"],
                                 capture_output=True, text=True)
            self.assertEqual(bad.returncode, 2)
            self.assertIn("block_length", bad.stderr)
            moe = subprocess.run([sys.executable, gen, ckpt("llada_moe"), "--prompt-ids", "1"],
                                 capture_output=True, text=True)
            self.assertEqual(moe.returncode, 2)
            self.assertIn("not supported", moe.stderr)


if __name__ == "__main__":
    t0 = time.time()
    prog = unittest.main(exit=False)
    print(f"reference self-check: {time.time() - t0:.1f} s", file=sys.stderr)
    sys.exit(0 if prog.result.wasSuccessful() else 1)
