#!/usr/bin/env python3
"""The artifact is the program: runtime/ must hold no per-architecture layer sequence and no
per-policy decoding loop.

    check_runtime_knows_no_layer.py [SOURCE_ROOT] [--self-test]

Every backend executes the artifact's kernel records, which name the weights they read; so no
runtime code (comments aside) may name a weight role (q_proj, attn_norm, qBias, spec::kQNorm, a
layerWeightName(...) call, the importer's CanonicalWeights.h, ...). Likewise one interpreter runs
the artifact's decode programs and a request selects one by the name the artifact gives it, so no
runtime code may name a policy ("low-confidence", "entropy-bound"), hold a Policy enum or the
per-policy knob set (DecodingKnobs), or a policy's loop (runLowConfidence, ...). Op and rule
names of the decode programs (the accept rule and knob "entropy_bound") are not policies and
pass. Prints
each offending line and exits 1; exits 0 when there is none. --self-test checks that the scan
finds a planted role and a planted policy name and ignores them in comments, so the check
cannot pass by finding nothing.
"""

import os
import re
import sys

ROLE = re.compile(
    r"\b(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj|attn_norm|mlp_norm|ffn_norm|"
    r"q_norm|k_norm|q_bias|k_bias|v_bias|attnNorm|mlpNorm|qNorm|kNorm|qBias|vBias|"
    r"kQ|kK|kV|kO|kQNorm|kKNorm|kAttnNorm|kMlpNorm|kGate|kUp|kDown|kQBias|kKBias|kVBias|"
    # DiffusionGemma's roles (the moe record's own operand names, router and gate_up, are a
    # kernel's, like weight and bias, and pass).
    r"post_attn_norm|post_mlp_norm|pre_expert_norm|post_expert_norm|post_ffn_norm|layer_scalar|"
    r"encoder_layer_scalar|sc_pre_norm|sc_gate|sc_up|sc_down|experts_gate_up|experts_down|"
    r"kPostAttnNorm|kPostMlpNorm|kPreExpertNorm|kPostExpertNorm|kPostFfnNorm|kLayerScalar|"
    r"kEncoderLayerScalar|kScPreNorm|kScGate|kScUp|kScDown|kExpertsGateUp|kExpertsDown|"
    r"layerWeightName|LayerWeights|CanonicalWeights)\b")
POLICY = re.compile(
    r'("low-confidence"|"entropy-bound"|\bPolicy::|\benum class Policy\b|'
    r"\bDecodingKnobs\b|\brunLowConfidence\b|\brunEntropyBound\b|\bkPolicy\w+)")
SOURCE = (".h", ".cpp", ".cc", ".inc", ".fbs")


def code_of(text):
    """`text` with // and /* */ comments blanked out (line numbers kept)."""
    out, i, n = [], 0, len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_string = False
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        else:
            in_string = c == '"'
            out.append(c)
            i += 1
    return "".join(out)


def offending_lines(path, text):
    found = []
    for number, line in enumerate(code_of(text).split("\n"), 1):
        if ROLE.search(line) or POLICY.search(line):
            found.append(f"{path}:{number}: {line.strip()}")
    return found


def scan(root):
    """(offending lines, files scanned) under root/runtime."""
    found, scanned = [], 0
    runtime = os.path.join(root, "runtime")
    for directory, _, files in os.walk(runtime):
        for name in sorted(files):
            if name.endswith(SOURCE):
                path = os.path.join(directory, name)
                with open(path, encoding="utf-8") as f:
                    found += offending_lines(os.path.relpath(path, root), f.read())
                scanned += 1
    return found, scanned


def self_test():
    planted = ('int a = 1; // q_proj in a comment\nconst char *b = "attn_norm";\n/* kQNorm */\n'
               'if (p == "low-confidence") {}\n// Policy::entropyBound\nRule::entropyBound = "entropy_bound";\n')
    found = offending_lines("planted.cpp", planted)
    if found != ['planted.cpp:2: const char *b = "attn_norm";',
                 'planted.cpp:4: if (p == "low-confidence") {}']:
        print(f"self-test: the scan found {found!r}")
        return 1
    print("self-test: the planted role and policy names are found, the commented ones and an "
          "accept rule are not")
    return 0


def main(argv):
    if "--self-test" in argv:
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "..")
    found, scanned = scan(os.path.abspath(root))
    if scanned == 0:
        print(f"no runtime/ sources under {root}")
        return 1
    for line in found:
        print(line)
    print(f"{len(found)} line(s) of {scanned} runtime/ sources name a weight role or a policy")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
