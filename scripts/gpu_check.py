"""scripts/gpu-check: proves and times dlm's CUDA path from a GPU kit (scripts/gpu-kit), in one
command, on a machine that has nothing of dlm's build: the parts below in order, each in its own
time box, the summary (gpu-check.md and gpu-check.json in --out) rewritten as each part ends, so
that a slow part cannot lose the others. docs/gpu-check.md says what each part runs and how to
read the summary.

    scripts/gpu-check [--kit gpu-kit] [--out gpu-check-out] [--budget SECONDS] [--emulated]
                      [--parts environment,suites,models,sanitizer,rates,profile,real-size]
                      [--cases LABEL,LABEL]

--emulated runs the same parts against the emulated device (cuda-emu) with the kit's compiled
kernel cache: what CI runs so that the kit never rots. --parts and --cases narrow a rerun to some
parts and some tiny-model cases. A packed kit (KIT.json + kit.tar.xz, as scripts/gpu-kit writes
it) is unpacked into a scratch folder first. Exit status: 0 when every part that ran passed, 1
otherwise.
"""

import argparse
import glob
import json
import os
import shlex
import shutil
import site
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "runtime", "e2e"))

import device_cases  # noqa: E402

# The kit's test binaries that mean something on a real GPU and need nothing of the build tree:
# the driver's own checks (a real device: DlmCudaGpuTests; the driver table: DlmCudaDriverTests)
# and NVRTC compiling every generated kernel for sm_80 and sm_90 with the machine's toolkit.
PACKED_KIT = "kit.tar.xz"
SUITES = ["DlmCudaGpuTests", "DlmCudaDriverTests", "DlmCudaNvrtcTests"]
# One generation per kernel family under compute-sanitizer: (case label, what it covers).
SANITIZER_CASES = [
    ("llada greedy_prefix", "attention (prefix cache), rms_norm, rope, kv_store, sampler, GEMMs"),
    ("dream loop_entropy_bound", "the device block loop: entropy-bound accept, renoise"),
    ("llada loop_threshold", "the device block loop: threshold accept"),
    ("qwen3_int8 greedy", "widen_weight (8-bit weights)"),
    ("demo_fp8 fp8_gemm", "quantize_rows and the FP8 GEMM"),
    ("tiny_bf16 default", "DiffusionGemma: moe, soft_embedding, sliding window"),
]
SANITIZER_TOOLS = ["memcheck", "racecheck", "initcheck", "synccheck"]
# Cases dlm-prof profiles for per-kernel shares.
PROFILE_CASES = ["llada greedy_prefix", "tiny_bf16 default"]


class Summary:
    """The summary as it grows: one entry per part, written out (markdown and JSON) after each."""

    def __init__(self, out, header):
        self.out, self.header, self.parts = out, header, []
        os.makedirs(out, exist_ok=True)
        self.log = open(os.path.join(out, "gpu-check.log"), "w")

    def note(self, text):
        print(text, flush=True)
        self.log.write(text + "\n")
        self.log.flush()

    def add(self, part):
        self.parts.append(part)
        self.write()

    def passed(self):
        return all(p["status"] in ("ok", "skipped") for p in self.parts)

    def write(self):
        with open(os.path.join(self.out, "gpu-check.json"), "w") as f:
            json.dump({"header": self.header, "parts": self.parts, "passed": self.passed()}, f,
                      indent=1)
        lines = ["# dlm gpu-check", ""]
        lines += [f"- {k}: {v}" for k, v in self.header.items()]
        for part in self.parts:
            lines += ["", f"## {part['name']}: {part['status']} ({part['seconds']:.0f} s)", ""]
            lines += part["lines"]
        lines += ["", f"**{'passed' if self.passed() else 'FAILED'}**", ""]
        with open(os.path.join(self.out, "gpu-check.md"), "w") as f:
            f.write("\n".join(lines))


def run(cmd, timeout, env=None):
    """(exit status, stdout + stderr); 124 when it ran out of time (then it and what it started
    are killed: nothing of a part outlives its box), 127 when it cannot start."""
    try:
        rc, out, err = device_cases.run_process(cmd, timeout, env)
        return rc, out + err
    except OSError as e:
        return 127, str(e)


def run_json(cmd, timeout, env=None):
    """(exit status, the JSON object stdout printed or None, stdout + stderr)."""
    try:
        rc, out, err = device_cases.run_process(cmd, timeout, env)
    except OSError as e:
        return 127, None, str(e)
    try:
        parsed = json.loads(out) if rc == 0 else None
    except ValueError as e:
        return 1, None, f"its output is not JSON ({e}): {out[-300:]}{err[-300:]}"
    return rc, parsed, out + err


def command_text(cmd):
    return " ".join(shlex.quote(c) for c in cmd)


class Check:
    def __init__(self, args):
        self.args = args
        self.start = time.monotonic()
        self.scratch = tempfile.mkdtemp(prefix="dlm-gpu-check-")
        self.kit = self.unpacked(os.path.abspath(args.kit))
        self.device = "cuda-emu" if args.emulated else "cuda"
        self.dlm_run = os.path.join(self.kit, "bin", "dlm-run")
        self.cases_dir = os.path.join(self.kit, "cases")
        self.manifest = device_cases.load_manifest(self.cases_dir)
        self.env = self.kit_environment()
        self.note = print  # the summary's log once there is one
        self.figures = {}  # each part's figures by its key, for the parts after it
        self.share = self.remaining_shares = 1.0

    def unpacked(self, kit):
        """The kit's folder: `kit` itself, or where its kit.tar.xz is unpacked."""
        packed = os.path.join(kit, PACKED_KIT)
        if not os.path.exists(packed):
            return kit
        target = os.path.join(self.scratch, "kit")
        with tarfile.open(packed) as archive:
            archive.extractall(target)
        return target

    def kit_environment(self):
        """The kit's libraries first, then the CUDA toolkit's (NVRTC, cuBLASLt) and the driver's;
        on the emulated device the kit's kernel cache and prelude headers (no compiler needed)."""
        env = dict(os.environ)
        paths = [os.path.join(self.kit, "lib")]
        cuda_homes = [h for h in (os.environ.get("CUDA_HOME"), "/usr/local/cuda") if h]
        for toolkit in [os.path.join(h, d) for h in cuda_homes
                        for d in ("lib64", "lib", "targets/x86_64-linux/lib")] + \
                ["/usr/local/nvidia/lib64"]:
            if os.path.isdir(toolkit):
                paths.append(toolkit)
        # Where a machine has cuBLASLt only as PyTorch's wheels have it (nvidia-cublas).
        for packages in site.getsitepackages() + [site.getusersitepackages()]:
            paths += sorted(glob.glob(os.path.join(packages, "nvidia", "*", "lib")))
        if env.get("LD_LIBRARY_PATH"):
            paths.append(env["LD_LIBRARY_PATH"])
        env["LD_LIBRARY_PATH"] = ":".join(dict.fromkeys(paths))
        if self.args.emulated:
            env["DLM_EMU_CACHE_DIR"] = os.path.join(self.kit, "emu", "cache")
            env["DLM_EMU_SOURCE_DIR"] = os.path.join(self.kit, "emu", "source")
        return env

    def left(self):
        return self.args.budget - (time.monotonic() - self.start)

    def box(self):
        """The running part's time box: its share of what is left, against the shares of the parts
        still to run (PARTS; the main loop sets share and remaining_shares), so time a part does
        not use goes to the parts after it and the last part gets all that is left."""
        return max(0.0, self.left() * min(1.0, self.share / self.remaining_shares))

    # --- parts ----------------------------------------------------------------------------------

    def environment(self):
        lines = []
        if self.args.emulated:
            lines.append("device: the emulated CUDA device (cuda-emu), compute capability 9.0")
            return "ok", lines, {}
        query = "name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem," \
                "clocks.max.mem,power.limit"
        rc, out = run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], 30)
        lines.append(f"`nvidia-smi --query-gpu={query}`: {out.strip() if rc == 0 else 'failed: ' + out.strip()}")
        figures = {"nvidia_smi": out.strip()} if rc == 0 else {}
        return ("ok" if rc == 0 else "FAILED"), lines, figures

    def suites(self):
        lines, failed, figures = [], False, {}
        box = self.box()
        deadline = time.monotonic() + box
        for suite in SUITES:
            binary = os.path.join(self.kit, "bin", suite)
            if not os.path.exists(binary):
                lines.append(f"- {suite}: not in the kit")
                failed = True
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 1:
                lines.append(f"- {suite}: not run (time box)")
                continue
            rc, out = run([binary, "--gtest_brief=1"], remaining, self.env)
            tail = [l for l in out.splitlines() if l.startswith(("[  PASSED", "[  FAILED",
                                                                   "[  SKIPPED", "  GPU"))]
            status = {0: "ok", 124: "timed out"}.get(rc, f"FAILED (exit {rc})")
            failed |= rc != 0
            lines.append(f"- `{suite}`: {status}; " + "; ".join(t.strip() for t in tail[:6]))
            if rc not in (0,):
                lines += ["  ```"] + [f"  {l}" for l in out.splitlines()[-15:]] + ["  ```"]
            figures[suite] = rc
        return ("FAILED" if failed else "ok"), lines, figures

    def models(self):
        cases = self.manifest["cases"]
        if self.args.cases:
            wanted = set(self.args.cases.split(","))
            cases = [c for c in cases if c["label"] in wanted]
            unknown = wanted - {c["label"] for c in cases}
            if unknown:
                return "FAILED", [f"no such case: {', '.join(sorted(unknown))}"], {}
        if self.device == "cuda":
            first = next(iter(self.manifest["artifacts"]))
            reason = device_cases.missing_cuda_driver(
                self.dlm_run, os.path.join(self.cases_dir, first + ".dlm"), self.env)
            if reason:
                return "FAILED", [f"no CUDA device to run on: {reason}"], {}
        lines, counts = [], {"ok": 0, "failed": 0, "not run": 0}
        deadline = time.monotonic() + self.box()

        def on_result(case, problems, seconds, note):
            self.note(device_cases.report_line(case["label"], problems, case["cpu"], seconds,
                                               self.device, note))

        # A real GPU runs several tiny cases at once (16 cores there); the emulated device uses
        # every core for one.
        jobs = 1 if self.args.emulated else 4
        results, seconds, runs = device_cases.check(self.cases_dir, self.dlm_run, self.device,
                                                    self.env, self.scratch, on_result, deadline,
                                                    cases, jobs)
        for label, problems, _, note in results:
            key = "not run" if problems is None else ("failed" if problems else "ok")
            counts[key] += 1
            lines += [f"- {label}: {p}" for p in problems or []]
            if note:
                lines.append(f"- {label}: {note}")
        lines.insert(0, f"{counts['ok']} of {len(results)} cases held to the cpu "
                        f"({counts['failed']} failed, {counts['not run']} not run); {runs} "
                        f"{self.device} runs, {seconds:.1f} s of dlm-run ({jobs} at a time); the "
                        f"cases and their "
                        f"bounds: tests/runtime/e2e/device_cases.py")
        status = "ok" if counts["failed"] == 0 and counts["not run"] == 0 else "FAILED"
        return status, lines, {"cases": counts, "device_seconds": seconds, "runs": runs}

    def case(self, label):
        for case in self.manifest["cases"]:
            if case["label"] == label:
                return case
        return None

    def sanitizer(self):
        if self.args.emulated:
            return "skipped", ["compute-sanitizer needs a real GPU; on the emulated device the "
                               "checked build (AddressSanitizer) and DLM_EMU_CHECK=all hold the "
                               "kernels to the same rules"], {}
        tool = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
        if not os.path.exists(tool):
            return "skipped", ["compute-sanitizer is not on this machine"], {}
        lines, failed, figures = [], False, {}
        deadline = time.monotonic() + self.box()
        for tool_name in SANITIZER_TOOLS:
            for label, covers in SANITIZER_CASES if tool_name == "memcheck" else \
                    SANITIZER_CASES[:2]:
                case = self.case(label)
                remaining = deadline - time.monotonic()
                if case is None or remaining <= 2:
                    lines.append(f"- {tool_name} {label}: not run "
                                 f"({'no such case' if case is None else 'time box'})")
                    continue
                cmd = [tool, "--tool", tool_name, "--error-exitcode", "3", self.dlm_run,
                       os.path.join(self.cases_dir, case["artifact"] + ".dlm"), *case["args"],
                       "--device", "cuda", "--threads", "2"]
                rc, out = run(cmd, remaining, dict(self.env, **case["env"]))
                summary = [l for l in out.splitlines() if "ERROR SUMMARY" in l]
                errors = any("ERROR SUMMARY: 0 errors" not in l for l in summary)
                # compute-sanitizer's own words where the machine's runtime refuses it (gVisor).
                refused = "Device not supported" in out and not errors
                # A tool slower than its box has found nothing wrong so far: not finished.
                unfinished = rc == 124 and not errors
                status = "ok" if rc == 0 else ("refused the device" if refused else
                                               "not finished in its box" if unfinished else
                                               f"FAILED (exit {rc})")
                failed |= rc != 0 and not refused and not unfinished
                lines.append(f"- {tool_name} `{label}` ({covers}): {status}"
                             f"{'; ' + summary[-1].strip() if summary else ''}")
                if rc != 0 and not refused and not unfinished:
                    lines += ["  ```"] + [f"  {l}" for l in out.splitlines()[-20:]] + ["  ```"]
                figures[f"{tool_name} {label}"] = status
        return ("FAILED" if failed else "ok"), lines, figures

    def rates(self):
        if self.args.emulated:
            return "skipped", ["bandwidth and GEMM rate: a real GPU only"], {}
        script = os.path.join(ROOT, "scripts", "gpu_rates.py")
        cmd = [sys.executable, script]
        # The machine's own environment: the kit's libraries (Debian's libstdc++) must not come
        # before what PyTorch was built against.
        rc, figures, out = run_json(cmd, self.box(), dict(os.environ))
        if rc != 0:
            return "FAILED", [f"`{command_text(cmd)}` failed (exit {rc}):", "```", out[-2000:],
                              "```"], {}
        lines = [f"`{command_text(['python3', 'scripts/gpu_rates.py'])}`:"]
        lines += [f"- {k}: {v}" for k, v in figures.items()]
        return "ok", lines, figures

    def profile(self):
        lines, figures, failed = [], {}, False
        deadline = time.monotonic() + self.box()
        prof = os.path.join(self.kit, "bin", "dlm-prof")
        for label in PROFILE_CASES:
            case = self.case(label)
            remaining = deadline - time.monotonic()
            if case is None or remaining <= 2:
                lines.append(f"- {label}: not run "
                             f"({'no such case' if case is None else 'time box'})")
                continue
            cmd = [prof, os.path.join(self.cases_dir, case["artifact"] + ".dlm"), *case["args"],
                   "--device", self.device, "--warmup", "1", "--repeat", "3", "--json"]
            rc, report, out = run_json(cmd, remaining, dict(self.env, **case["env"]))
            if rc != 0:
                failed = True
                lines.append(f"- `{label}`: dlm-prof failed (exit {rc}): {out.strip()[-500:]}")
                continue
            figures[label] = report
            lines.append(f"- `{label}` (`dlm-prof ... --device {self.device} --warmup 1 "
                         f"--repeat 3 --json`): " + self.shares(report))
        return ("FAILED" if failed else "ok"), lines, figures

    @staticmethod
    def shares(report):
        """'gemm 61%, attention 12%, ...; 420.0 tokens/s' from dlm-prof's --json report."""
        kinds = sorted(report.get("kernels", []), key=lambda k: -k["share"])
        text = ", ".join(f"{k['kind']} {100 * k['share']:.0f}%" for k in kinds[:8]) or \
            "no kernel times recorded on this backend"
        totals = report.get("totals", {})
        forward = report.get("forward_ms", {})
        return (f"{text}; {totals.get('tokens_per_second', 0):.1f} tokens/s, "
                f"{totals.get('tokens_per_forward', 0):.2f} tokens per forward; forward ms "
                f"{json.dumps(forward)}")

    def real_size(self):
        """The kit's real-size artifacts (scripts/gpu-kit --real-size, real/manifest.json): each
        one's parameter file written here with the seeded random contents its artifact recorded
        (dlm-params random), then dlm-prof on the device, held against the roofline of this GPU's
        measured bandwidth and GEMM rate (the rates part)."""
        manifest_path = os.path.join(self.kit, "real", "manifest.json")
        if self.args.emulated:
            return "skipped", ["real-size benchmarks: a real GPU only"], {}
        if not os.path.exists(manifest_path):
            return "skipped", ["this kit has no real-size artifacts (scripts/gpu-kit --real-size "
                               "adds them)"], {}
        with open(manifest_path) as f:
            manifest = json.load(f)
        lines, figures, failed = list(manifest.get("not_yet", [])), {}, False
        deadline = time.monotonic() + self.box()
        for model in manifest["models"]:
            status, model_lines, model_figures = self.real_size_model(model, deadline)
            failed |= status != "ok"
            lines += model_lines
            figures[model["name"]] = model_figures
        return ("FAILED" if failed else "ok"), lines, figures

    def real_size_model(self, model, deadline):
        """One real-size model: (status, lines, figures). Its parameter file (gigabytes) is
        removed whatever happens: the next model needs the disk."""
        artifact = os.path.join(self.kit, "real", model["artifact"])
        try:
            return self.benchmark_real_size(model, artifact, deadline)
        finally:
            for leftover in glob.glob(os.path.splitext(artifact)[0] + ".dlmp*"):
                os.remove(leftover)

    def benchmark_real_size(self, model, artifact, deadline):
        remaining = lambda: max(1.0, deadline - time.monotonic())  # noqa: E731
        write = [os.path.join(self.kit, "bin", "dlm-params"), "random", artifact]
        rc, out = run(write, remaining(), self.env)
        if rc != 0:
            return "FAILED", [f"- {model['name']}: `{command_text(write)}` failed (exit {rc}): "
                              f"{out.strip()[-500:]}"], {}
        # The speed: dlm-run as a user runs it (CUDA graphs, the device loop). The shares:
        # dlm-prof, whose profiled forwards run eagerly (README, Profiling).
        fast = [os.path.join(self.kit, "bin", "dlm-run"), artifact, *model["run_args"],
                "--device", "cuda", "--json"]
        rc, generated, out = run_json(fast, remaining(), self.env)
        if rc != 0:
            return "FAILED", [f"- {model['name']}: dlm-run failed (exit {rc}): "
                              f"{out.strip()[-800:]}"], {}
        forward_ms = 1e3 * generated["seconds"] / max(1, generated["forwards"])
        lines = [f"- **{model['what']}**, random weights (`dlm-params random`, then "
                 f"`dlm-run {model['artifact']} --prompt-ids <{CONTEXT_NOTE}> "
                 f"{command_text(model['run_args'][2:])} --device cuda --json`): "
                 f"{generated['forwards']} forwards ({generated['decode_steps']} denoise steps "
                 f"and the prompt's prefill) in {generated['seconds']:.3f} s, {forward_ms:.2f} ms "
                 f"per forward, {generated['tokens_per_second']:.0f} tokens/s"]
        figures = {"dlm_run": {k: generated[k] for k in ("forwards", "seconds", "decode_steps",
                                                          "tokens_per_second")},
                   "forward_ms": forward_ms}
        rates = self.figures.get("rates", {})
        if rates:
            memory_ms = model["weight_bytes"] / (rates["copy_bandwidth_gb_per_s"] * 1e9) * 1e3
            compute_ms = model["step_flops"] / (rates["bf16_gemm_tflop_per_s"] * 1e12) * 1e3
            floor = max(memory_ms, compute_ms)
            lines.append(f"  roofline of one denoise step: weights "
                         f"{model['weight_bytes'] / 1e9:.2f} GB / "
                         f"{rates['copy_bandwidth_gb_per_s']} GB/s = {memory_ms:.2f} ms, "
                         f"{model['step_flops'] / 1e12:.2f} TFLOP / "
                         f"{rates['bf16_gemm_tflop_per_s']} TFLOP/s = {compute_ms:.2f} ms: a "
                         f"forward (the prefill's included) runs at {floor / forward_ms:.1%} of "
                         f"the larger")
            figures.update(memory_floor_ms=memory_ms, compute_floor_ms=compute_ms,
                           fraction_of_roofline=floor / forward_ms)
        prof = [os.path.join(self.kit, "bin", "dlm-prof"), artifact, *model["prof_args"],
                "--device", "cuda", "--json"]
        rc, report, out = run_json(prof, remaining(), self.env)
        if rc != 0:  # the timing above stands; the shares are lost
            lines.append(f"  dlm-prof failed (exit {rc}): {out.strip()[-500:]}")
            return "FAILED", lines, figures
        lines.append(f"  eager and profiled (`dlm-prof ... {command_text(model['prof_args'])}`):"
                     f" denoise step median {report['step_ms']['median']:.2f} ms; kernel shares: "
                     f"{self.shares(report)}")
        figures.update(profiled_step_ms=report["step_ms"], totals=report["totals"],
                       kernels=report.get("kernels", []))
        return "ok", lines, figures


CONTEXT_NOTE = "the 512 ids of the manifest"

# (key, title, share of the budget on a GPU, share with --emulated) in the order they run; the
# key names the Check method (real-size: real_size).
PARTS = [("environment", "environment", 0.02, 0.01),
         ("suites", "test suites", 0.15, 0.1),
         ("models", "tiny models against the cpu", 0.32, 0.8),
         ("sanitizer", "compute-sanitizer", 0.15, 0.0),
         ("rates", "bandwidth and GEMM rate", 0.06, 0.0),
         ("profile", "per-kernel shares (dlm-prof)", 0.05, 0.09),
         ("real-size", "real-size benchmarks", 0.25, 0.0)]
PART_KEYS = [key for key, *_ in PARTS]


def kit_header(kit):
    try:
        with open(os.path.join(kit, "KIT.json")) as f:
            info = json.load(f)
    except OSError as e:
        return {"kit": f"unreadable: {e}"}
    header = {"kit": f"{info.get('commit', '?')} built {info.get('built', '?')} on "
                     f"{info.get('cpu', '?')}, {info.get('size_mib', '?')} MiB"}
    # Where the tree is a git checkout: a kit built from another commit may not match its scripts.
    tree = tree_commit()
    if tree and tree != info.get("commit"):
        header["warning"] = (f"the kit was built from {info.get('commit')}, this tree is "
                             f"{tree}: rebuild it with scripts/gpu-kit")
    return header


def tree_commit():
    """`git describe --always --dirty` of this tree; None where it is no git checkout or there is
    no git (the GPU machine may have neither)."""
    try:
        proc = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                              capture_output=True, text=True)
    except OSError:
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kit", default=os.path.join(ROOT, "gpu-kit"))
    ap.add_argument("--out", default="gpu-check-out")
    ap.add_argument("--emulated", action="store_true",
                    help="against the emulated device (cuda-emu), tiny models only")
    ap.add_argument("--budget", type=float, default=None,
                    help="wall seconds for all parts (default 470, emulated 1500)")
    ap.add_argument("--parts", default=",".join(PART_KEYS),
                    help="the parts to run, of: " + ",".join(PART_KEYS))
    ap.add_argument("--cases", default="", help="only these tiny-model cases (labels, commas)")
    args = ap.parse_args(argv)
    if args.budget is None:
        args.budget = 1500.0 if args.emulated else 470.0
    unknown = set(args.parts.split(",")) - set(PART_KEYS)
    if unknown:
        ap.error(f"unknown --parts {','.join(sorted(unknown))} (known: {','.join(PART_KEYS)})")
    if not os.path.exists(os.path.join(args.kit, "KIT.json")):
        print(f"gpu-check: no kit at {args.kit} (make one with scripts/gpu-kit)", file=sys.stderr)
        return 2
    check = Check(args)
    argv = sys.argv[1:] if argv is None else argv
    header = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
              "device": check.device, "command": command_text(["scripts/gpu-check", *argv]),
              **kit_header(args.kit), "budget": f"{args.budget:.0f} s"}
    summary = Summary(args.out, header)
    check.note = summary.note
    try:
        chosen = [p for p in PARTS if p[0] in args.parts.split(",")]
        for index, (key, name, gpu_share, emulated_share) in enumerate(chosen):
            shares = [p[3 if args.emulated else 2] for p in chosen[index:]]
            check.share = emulated_share if args.emulated else gpu_share
            check.remaining_shares = max(sum(shares), 1e-9)
            part = getattr(check, key.replace("-", "_"))
            started = time.monotonic()
            summary.note(f"gpu-check: {name} ...")
            try:
                status, lines, figures = part()
            except Exception as e:  # a broken part must not lose the others' results
                status, lines, figures = "FAILED", [f"the part raised {type(e).__name__}: {e}"], {}
                summary.note(traceback.format_exc())
            check.figures[key] = figures
            summary.add({"name": name, "status": status, "seconds": time.monotonic() - started,
                         "lines": lines, "figures": figures})
            summary.note(f"gpu-check: {name}: {status}")
    finally:
        shutil.rmtree(check.scratch, ignore_errors=True)
    summary.note(f"gpu-check: {'passed' if summary.passed() else 'FAILED'} in "
                 f"{time.monotonic() - check.start:.0f} s; summary in {args.out}/gpu-check.md")
    return 0 if summary.passed() else 1


if __name__ == "__main__":
    sys.exit(main())
