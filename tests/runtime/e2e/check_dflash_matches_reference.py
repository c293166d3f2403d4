#!/usr/bin/env python3
"""dlm's DFlash speculative decoding against the authors' dflash_generate on the committed fixtures
(tests/reference/dflash/fixtures: a tiny Qwen3 target and two drafters, traced with dflash 0.1.0 and
transformers 5.23; README.md there).

For each drafter: `dlmc compile target --draft <drafter>` (the dflash program is the pair's default),
then `dlm-run --prompt-ids <the trace's> --max-new-tokens <the trace's> --json` greedy on the cpu (and
on cuda-emu with --cuda-emu, compiled --target all --precision f32). The generated ids must equal
dflash_generate's (which equal the target's greedy generate(), also checked), the tokens committed per
verify must equal the trace's acceptance lengths round by round, and --policy autoregressive on the
same artifact must give the same ids.

A Qwen3-MoE target too: the autoregressive fixtures' qwen3_moe_tiny (Qwen3MoeForCausalLM, traced by
transformers' generate()) with dflash_default's random drafter re-pointed at its 3 layers
(num_target_layers 3; the shapes agree). Its drafts are never accepted, so this holds the MoE target's
verify and bonus to transformers' greedy ids (lossless whatever the drafter), not the acceptance path.
Exits 0 when every run matches, 1 otherwise, 77 when a tool is missing.

    check_dflash_matches_reference.py --dlmc build/bin/dlmc --dlm-run build/bin/dlm-run [--cuda-emu]
"""

import json
import os
import shutil
import subprocess
import sys

from e2e_tools import check_fixtures, compile_artifact

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "reference", "dflash", "fixtures")
MOE_TARGET = os.path.join(ROOT, "tests", "reference", "autoregressive", "fixtures", "qwen3_moe_tiny")
MOE_CASE = "qwen3_moe_tiny+dflash_default"
DRAFTERS = ["dflash_explicit", "dflash_default", MOE_CASE]


def compile_pair(dlmc, drafter, device, scratch, target=os.path.join(FIXTURES, "target")):
    artifact = os.path.join(scratch, "%s-%s.dlm" % (os.path.basename(drafter), device))
    compiled = compile_artifact(dlmc, [target, "--draft", os.path.join(FIXTURES, drafter)], artifact,
                                device)
    if compiled.returncode != 0:
        print("%s on %s: dlmc compile failed: %s" % (drafter, device, compiled.stderr.strip()))
        return None
    return artifact


def run(dlm_run, artifact, trace, device, extra):
    prompt = ",".join(str(i) for i in trace["prompt_ids"])
    done = subprocess.run([dlm_run, artifact, "--prompt-ids", prompt, "--max-new-tokens",
                           str(trace["max_new_tokens"]), "--device", device, "--json"] + extra,
                          capture_output=True, text=True)
    if done.returncode != 0:
        return None, done.stderr.strip()
    return json.loads(done.stdout), ""


def repointed_drafter(scratch, layers):
    """dflash_default's weights with a config for a target of `layers` layers."""
    folder = os.path.join(scratch, "dflash_default-%d-layers" % layers)
    if not os.path.isdir(folder):
        os.makedirs(folder)
        source = os.path.join(FIXTURES, "dflash_default")
        with open(os.path.join(source, "config.json")) as f:
            config = json.load(f)
        config["num_target_layers"] = layers
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(config, f)
        shutil.copy(os.path.join(source, "model.safetensors"), folder)
    return folder


def check_moe_target(dlmc, dlm_run, device, scratch):
    with open(os.path.join(MOE_TARGET, "trace.json")) as f:
        traced = json.load(f)
    with open(os.path.join(MOE_TARGET, "config.json")) as f:
        layers = json.load(f)["num_hidden_layers"]
    greedy = traced["greedy"]
    trace = {"prompt_ids": traced["prompt_ids"], "max_new_tokens": greedy["max_new_tokens"]}
    artifact = compile_pair(dlmc, repointed_drafter(scratch, layers), device, scratch, MOE_TARGET)
    if not artifact:
        return False
    out, message = run(dlm_run, artifact, trace, device, [])
    if out is None:
        print("%s on %s: dlm-run failed: %s" % (MOE_CASE, device, message))
        return False
    errors = []
    if out["policy"] != "dflash":
        errors.append("the default program is %s, not dflash" % out["policy"])
    if out["output_ids"] != greedy["new_ids"]:
        errors.append("tokens %s, transformers' greedy %s" % (out["output_ids"], greedy["new_ids"]))
    print("%s on %s: %d tokens %s, tokens per verify %s, %d forwards" %
          (MOE_CASE, device, len(out["output_ids"]),
           "equal" if out["output_ids"] == greedy["new_ids"] else "DIFFER",
           out["block_lengths"][1:], out["forwards"]))
    for error in errors:
        print("  " + error)
    return not errors


def check(drafter, dlmc, dlm_run, device, scratch):
    if drafter == MOE_CASE:
        return check_moe_target(dlmc, dlm_run, device, scratch)
    with open(os.path.join(FIXTURES, drafter, "trace.json")) as f:
        trace = json.load(f)
    artifact = compile_pair(dlmc, drafter, device, scratch)
    if not artifact:
        return False
    errors = []
    if trace["new_ids"] != trace["target_greedy_new_ids"]:
        errors.append("the fixture's dflash output is not the target's greedy output")
    out, message = run(dlm_run, artifact, trace, device, [])
    if out is None:
        print("%s on %s: dlm-run failed: %s" % (drafter, device, message))
        return False
    if out["policy"] != "dflash":
        errors.append("the default program is %s, not dflash" % out["policy"])
    if out["output_ids"] != trace["new_ids"]:
        errors.append("tokens %s, dflash_generate %s" % (out["output_ids"], trace["new_ids"]))
    # The prefill commits the first token; every later block is one verify's tokens.
    per_verify = out["block_lengths"][1:]
    if per_verify != trace["acceptance_lengths_benchmark"]:
        errors.append("tokens per verify %s, dflash %s" % (per_verify,
                                                            trace["acceptance_lengths_benchmark"]))
    ar, message = run(dlm_run, artifact, trace, device, ["--policy", "autoregressive"])
    if ar is None or ar["output_ids"] != trace["new_ids"]:
        errors.append("--policy autoregressive gives %s" % (ar["output_ids"] if ar else message))
    print("%s on %s: %d tokens %s, tokens per verify %s, %d forwards (autoregressive %s)" %
          (drafter, device, len(out["output_ids"]),
           "equal" if out["output_ids"] == trace["new_ids"] else "DIFFER", per_verify,
           out["forwards"], ar["forwards"] if ar else "failed"))
    for error in errors:
        print("  " + error)
    return not errors


def main(argv):
    return check_fixtures(argv, __doc__.splitlines()[0], DRAFTERS, check)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
