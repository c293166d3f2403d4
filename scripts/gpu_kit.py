"""scripts/gpu-kit: writes the GPU kit, everything scripts/gpu-check needs on a machine that has a
GPU but nothing of dlm's build (no MLIR, oneDNN, ICU, Boost or protobuf; no compiler needed):

    gpu-kit/bin/        dlm-run, dlm-prof, dlm-bench-engine, dlm-params and the CUDA test suites
                        gpu-check runs
    gpu-kit/lib/        every shared library they load that is not glibc's or the CUDA toolkit's
    gpu-kit/cases/      the tiny models compiled with --target all, and the cpu's outputs for each
                        case (tests/runtime/e2e/device_cases.py), manifest.json
    gpu-kit/emu/        the emulated device's compiled kernels for those cases (cache/) and the
                        prelude headers their cache keys hash (source/), for gpu-check --emulated
    gpu-kit/KIT.json    what the kit was built from, and its size

    scripts/gpu-kit [--build build] [--out gpu-kit] [--check-out DIR] [--max-mib 40]
                    [--real-size]

--real-size adds gpu-kit/real/: artifacts of real models' shapes (REAL_SIZE) compiled with
external, seeded random parameters (`dlmc compile --parameters external --random-parameters`,
from all-zero checkpoints that take no disk), which gpu-check's real-size part completes with
`dlm-params random` on the GPU machine and benchmarks against the roofline. Not in CI: the
8B compile reads 16 GB.

Those folders travel packed, as gpu-kit/kit.tar.xz beside KIT.json (oneDNN and ICU's data alone
are 68 MiB unpacked, about 15 MiB packed); gpu-check unpacks them into a scratch folder. Runs after the
usual build (scripts/setup). Before packing it runs `scripts/gpu-check --emulated` from the
unpacked kit, with the host compiler still at hand, which fills the kit's kernel cache and proves
the kit (summary in --check-out, default OUT/../gpu-check-emulated); after packing, one case from
the packed kit (summary in CHECK_OUT-packed). Exit status 0 when the kit is written, within
--max-mib, and both checks passed.
"""

import argparse
import datetime
import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "runtime", "e2e"))

import device_cases  # noqa: E402
import gpu_check  # noqa: E402

TOOLS = ["dlm-run", "dlm-prof", "dlm-bench-engine", "dlm-params"]
MAKE_LLADA = os.path.join(ROOT, "bench", "make_llada_checkpoint.py")
# The real-size benchmarks: LLaDA shapes (make_llada_checkpoint.py's flags), the denoise step of
# issue 30 (a 256-token canvas after a 512-token prompt, prefix cache, 16 steps), bf16.
CANVAS, CONTEXT, STEPS = 256, 512, 16
REAL_SIZE = {
    "llada-87m": {"what": "LLaDA 87M (bf16, the sanity run)",
                  "shape": {"hidden": 768, "layers": 12, "heads": 12, "kv_heads": 12,
                            "mlp": 2048, "vocab": 960}},
    "llada-8b": {"what": "LLaDA-8B shape (bf16)",
                 "shape": {"hidden": 4096, "layers": 32, "heads": 32, "kv_heads": 32,
                           "mlp": 12288, "vocab": 126464}},
}
REAL_SIZE_NOT_YET = [
    "- DiffusionGemma-26B-A4B with FP8 weights (against vLLM's published 1,288 tokens/s on the "
    "H200): not supported yet: dlm imports DiffusionGemma but has no FP8-dynamic checkpoint "
    "maker of that shape",
    "- Qwen3-8B with a DFlash drafter (block 16), the acceptance-free round time: not supported "
    "yet: an FP8 or real-size drafter pair maker is missing",
]
DECODE_ARGS = ["--gen-length", str(CANVAS), "--block-length", str(CANVAS), "--steps", str(STEPS),
               "--cache", "prefix"]
PROF_ARGS = ["--synthetic-length", str(CONTEXT), *DECODE_ARGS, "--warmup", "1", "--repeat", "2"]
# dlm-run's prompt: CONTEXT ids of the demo tokenizer's.
RUN_ARGS = ["--prompt-ids", ",".join(str(3 + 7 * i % 900) for i in range(CONTEXT)),
            *DECODE_ARGS]
# The GPU machine's own: glibc (the kit's binaries need 2.36 or newer, Debian 12's), the driver,
# and the CUDA toolkit's libraries (NVRTC, cuBLASLt), which the toolkit there provides.
SYSTEM_LIBRARIES = ("linux-vdso", "ld-linux", "libc.so", "libm.so", "libpthread.so", "libdl.so",
                    "librt.so", "libresolv.so", "libutil.so", "libcuda.so")
TOOLKIT_PREFIXES = ("/usr/local/cuda",)
# The emulated device's prelude and what it includes from the source tree (EmuModules.cpp hashes
# the prelude headers into every kernel's cache key).
PRELUDE_DIRS = ["runtime/cuda", "runtime/cuda/emu", "support"]


def shared_libraries(binary):
    """{soname: path} of what `binary` loads, by ldd; an error naming the library ldd cannot
    find."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        parts = line.split()
        if "=>" not in parts:
            continue
        name, path = parts[0], parts[parts.index("=>") + 1]
        if path == "not":
            raise RuntimeError(f"{binary} needs {name}, which ldd cannot find")
        found[name] = path
    return found


def bundled(name, path):
    return not name.startswith(SYSTEM_LIBRARIES) and not path.startswith(TOOLKIT_PREFIXES)


def copy_binaries(build, kit):
    """The tools and suites into bin/, their libraries into lib/; the list of binaries."""
    names = TOOLS + gpu_check.SUITES
    missing = [n for n in names if not os.path.exists(os.path.join(build, "bin", n))]
    if missing:
        raise RuntimeError(f"not built in {build}: {', '.join(missing)} (run scripts/setup; the "
                           "CUDA suites need the CUDA toolkit)")
    libraries = {}
    for name in names:
        source = os.path.join(build, "bin", name)
        target = os.path.join(kit, "bin", name)
        shutil.copy2(source, target)
        subprocess.run(["strip", "--strip-unneeded", target], check=True)
        libraries.update({n: p for n, p in shared_libraries(source).items() if bundled(n, p)})
    for name, path in sorted(libraries.items()):
        target = os.path.join(kit, "lib", name)
        shutil.copy2(os.path.realpath(path), target)
        subprocess.run(["strip", "--strip-unneeded", target], check=True)
    return names, sorted(libraries)


def copy_prelude(kit):
    for folder in PRELUDE_DIRS:
        for header in glob.glob(os.path.join(ROOT, folder, "*.h")):
            target = os.path.join(kit, "emu", "source", folder)
            os.makedirs(target, exist_ok=True)
            shutil.copy2(header, target)


def trim_kernel_cache(kit):
    """Keeps the compiled kernels only: their sources, logs and the precompiled prelude are for
    compiling, which the kit never does."""
    for path in glob.glob(os.path.join(kit, "emu", "cache", "*")):
        if not path.endswith(".so"):
            os.remove(path)


def llada_costs(shape):
    """(bytes of the weights a denoise step streams, its FLOPs): every projection and the LM head
    over the canvas, attention over canvas x (context + canvas); bf16 weights."""
    h, layers, heads, kv, mlp, vocab = (shape[k] for k in ("hidden", "layers", "heads",
                                                            "kv_heads", "mlp", "vocab"))
    head_dim = h // heads
    per_layer = h * (heads + 2 * kv) * head_dim + heads * head_dim * h + 3 * h * mlp
    matmul = layers * per_layer + vocab * h
    attention = layers * 4 * heads * head_dim * CANVAS * (CONTEXT + CANVAS)
    return 2 * matmul, 2 * matmul * CANVAS + attention


def add_real_size(build, kit, work):
    """Compiles REAL_SIZE into kit/real/ with random external parameters; real/manifest.json."""
    os.makedirs(os.path.join(kit, "real"))
    models = []
    for name, spec in REAL_SIZE.items():
        ckpt = os.path.join(work, name)
        shape = spec["shape"]
        subprocess.run([sys.executable, MAKE_LLADA, "--out", ckpt, "--dtype", "bf16", "--zeros",
                        *[f"--{k.replace('_', '-')}={v}" for k, v in shape.items()]],
                       check=True, stdout=subprocess.DEVNULL)
        artifact = os.path.join(kit, "real", name + ".dlm")
        cmd = [os.path.join(build, "bin", "dlmc"), "compile", ckpt, "-o", artifact, "--target",
               "all", "--parameters", "external", "--random-parameters", "1", "--gen-length",
               str(CANVAS), "--block-length", str(CANVAS), "--steps", str(STEPS)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        shutil.rmtree(ckpt, ignore_errors=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
        weight_bytes, flops = llada_costs(shape)
        models.append({"name": name, "what": spec["what"], "artifact": name + ".dlm",
                       "weight_bytes": weight_bytes, "step_flops": flops,
                       "prof_args": PROF_ARGS, "run_args": RUN_ARGS})
        print(f"gpu-kit: real-size {name}: {os.path.getsize(artifact) / 2**20:.1f} MiB artifact",
              flush=True)
    with open(os.path.join(kit, "real", "manifest.json"), "w") as f:
        json.dump({"models": models, "not_yet": REAL_SIZE_NOT_YET}, f, indent=1)


def pack(staging, kit):
    """staging's folders into kit/kit.tar.xz, KIT.json beside it. Python's own lzma, so that no
    xz program is needed (Debian's minimal systems have none); preset 3: 38 s and 25 MiB here,
    where preset 6 took twice as long for 23 MiB."""
    os.makedirs(kit)
    with tarfile.open(os.path.join(kit, gpu_check.PACKED_KIT), "w:xz", preset=3) as packed:
        for member in sorted(os.listdir(staging)):
            packed.add(os.path.join(staging, member), arcname=member)
    shutil.copy2(os.path.join(staging, "KIT.json"), kit)
    with tarfile.open(os.path.join(kit, gpu_check.PACKED_KIT)) as packed:
        packed.getmembers()  # reads it whole: a broken archive fails here, not on the GPU machine


def size_mib(folder):
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(folder)
                for f in files)
    return total / 2**20


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(ROOT, "gpu-kit"))
    ap.add_argument("--check-out", default=None)
    ap.add_argument("--max-mib", type=float, default=40.0)
    ap.add_argument("--real-size", action="store_true",
                    help="add the real-size artifacts (random external parameters)")
    args = ap.parse_args(argv)
    final, build = os.path.abspath(args.out), os.path.abspath(args.build)
    check_out = args.check_out or os.path.join(os.path.dirname(final), "gpu-check-emulated")
    kit = final + ".staging"
    for folder in (final, kit):
        shutil.rmtree(folder, ignore_errors=True)
    for folder in ("bin", "lib", "cases", "emu/cache"):
        os.makedirs(os.path.join(kit, folder))

    binaries, libraries = copy_binaries(build, kit)
    copy_prelude(kit)
    print(f"gpu-kit: {len(binaries)} binaries, {len(libraries)} libraries", flush=True)
    failures = device_cases.prepare(os.path.join(build, "bin", "dlmc"),
                                    os.path.join(build, "bin", "dlm-run"),
                                    os.path.join(kit, "cases"))
    if failures:
        print("gpu-kit: preparing the cases failed:\n  " + "\n  ".join(failures),
              file=sys.stderr)
        return 1
    if args.real_size:
        add_real_size(build, kit, os.path.join(kit, "work"))
        shutil.rmtree(os.path.join(kit, "work"), ignore_errors=True)
    cases = len(device_cases.load_manifest(os.path.join(kit, "cases"))["cases"])
    print(f"gpu-kit: {cases} cases and the cpu's outputs in {kit}/cases", flush=True)
    info = {"commit": gpu_check.tree_commit() or "unknown", "built": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "cpu": cpu_name(), "binaries": binaries, "libraries": libraries, "cases": cases}
    with open(os.path.join(kit, "KIT.json"), "w") as f:
        json.dump(info, f, indent=1)

    # The emulated check from the kit fills its kernel cache (the compiler is here) and proves it.
    status = gpu_check.main(["--kit", kit, "--out", check_out, "--emulated", "--budget", "1200"])
    if status != 0:
        print(f"gpu-kit: the emulated check failed: {check_out}/gpu-check.md", file=sys.stderr)
        return 1
    trim_kernel_cache(kit)
    info["unpacked_mib"] = round(size_mib(kit), 1)
    with open(os.path.join(kit, "KIT.json"), "w") as f:
        json.dump(info, f, indent=1)
    pack(kit, final)
    shutil.rmtree(kit)
    info["size_mib"] = round(size_mib(final), 1)
    with open(os.path.join(final, "KIT.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(f"gpu-kit: {final} holds {info['size_mib']} MiB ({info['unpacked_mib']} MiB unpacked; "
          f"limit {args.max_mib:g})", flush=True)
    if info["size_mib"] > args.max_mib:
        print(f"gpu-kit: the kit is {info['size_mib']} MiB, over {args.max_mib:g}",
              file=sys.stderr)
        return 1
    # The packed kit as it travels: unpacked by gpu-check, its binaries start, one case passes.
    status = gpu_check.main(["--kit", final, "--out", check_out + "-packed", "--emulated",
                             "--cases", "llada greedy", "--parts", "environment,models"])
    if status != 0:
        print(f"gpu-kit: the packed kit failed: {check_out}-packed/gpu-check.md",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
