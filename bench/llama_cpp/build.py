#!/usr/bin/env python3
"""Fetch llama.cpp from the llama-cpp-python source distribution on PyPI and build
`llama-diffusion-cli` beside the project (never inside the repository).

    bench/llama_cpp/build.py [--version 0.3.36] [--jobs 2] [--cache DIR] [--force]

Steps (each cached under $DLM_BENCH_CACHE, default ~/.cache/dlm-bench/):

  1. `pip download --no-binary llama-cpp-python --no-deps llama-cpp-python==VERSION`
     -> src/llama_cpp_python-VERSION.tar.gz (the sdist vendors vendor/llama.cpp);
  2. unpack it, check the vendored tree has examples/diffusion/diffusion-cli.cpp and LLaDA
     support (conversion/llada.py, LLM_ARCH_LLADA in src/);
  3. CMake (Release, GGML_NATIVE=ON, static, no tests/server, LLAMA_OPENSSL=OFF) and
     `cmake --build --target llama-diffusion-cli llama-tokenize llama-quantize -j JOBS`
     -> llama.cpp-VERSION/build/bin/{llama-diffusion-cli,llama-tokenize,llama-quantize} and
     stamp.json
     (version, upstream commit, build time); the log is llama.cpp-VERSION.log.

Prints the path of the binary on success.  On any failure prints
"llama.cpp: skipped: <reason>" and exits with status 3 (library use: `ensure_built()` raises
`Skipped`).  LLAMA_CURL is deprecated in this llama.cpp (HTTP goes through cpp-httplib with
optional OpenSSL), so the build turns OpenSSL off instead; nothing here downloads models.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time

# llama-cpp-python 0.3.36 vendors ggml-org/llama.cpp@0c1e57098: examples/diffusion (LLaDA,
# Dream, RND1 ...), LLaDA in conversion/llada.py and src/llama-model.cpp.
DEFAULT_VERSION = "0.3.36"
TARGET = "llama-diffusion-cli"
TOKENIZE = "llama-tokenize"  # tells the prompt's token ids as llama.cpp sees them
QUANTIZE = "llama-quantize"  # makes the Q4_K_M GGUF from the f32 one (convert.py)


class Skipped(Exception):
    """llama.cpp cannot be used; str(e) is the reason."""


def cache_root(cache=None):
    root = cache or os.environ.get("DLM_BENCH_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "dlm-bench")
    os.makedirs(root, exist_ok=True)
    return root


def _run(cmd, log, cwd=None, env=None):
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        r = subprocess.run(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        tail = ""
        try:
            with open(log) as f:
                tail = "".join(f.readlines()[-15:])
        except OSError:
            pass
        raise Skipped(f"`{' '.join(cmd[:3])} ...` failed (exit {r.returncode}); log {log}\n{tail}")


def source_tree(version=DEFAULT_VERSION, cache=None, log=None):
    """Download and unpack the sdist; returns the vendored llama.cpp directory."""
    root = cache_root(cache)
    src = os.path.join(root, "src")
    os.makedirs(src, exist_ok=True)
    log = log or os.path.join(root, f"llama.cpp-{version}.log")
    tree = os.path.join(src, f"llama_cpp_python-{version}", "vendor", "llama.cpp")
    if not os.path.isfile(os.path.join(tree, "CMakeLists.txt")):
        archives = glob.glob(os.path.join(src, f"llama_cpp_python-{version}.tar.gz"))
        if not archives:
            _run([sys.executable, "-m", "pip", "download", "--no-binary", "llama-cpp-python",
                  "--no-deps", "--disable-pip-version-check", f"llama-cpp-python=={version}",
                  "-d", src], log)
            archives = glob.glob(os.path.join(src, f"llama_cpp_python-{version}.tar.gz"))
        if not archives:
            raise Skipped(f"pip download gave no llama_cpp_python-{version}.tar.gz in {src}")
        try:
            with tarfile.open(archives[0]) as t:
                t.extractall(src)
        except (tarfile.TarError, OSError) as e:
            raise Skipped(f"cannot unpack {archives[0]}: {e}")
    missing = [p for p in ("examples/diffusion/diffusion-cli.cpp", "conversion/llada.py")
               if not os.path.exists(os.path.join(tree, p))]
    if missing:
        raise Skipped(f"llama-cpp-python {version} vendors a llama.cpp without {', '.join(missing)}")
    with open(os.path.join(tree, "src", "llama-arch.cpp")) as f:
        if '"llada"' not in f.read():
            raise Skipped(f"llama-cpp-python {version} vendors a llama.cpp without LLaDA support")
    return tree


def upstream_commit(tree):
    """The llama.cpp commit the sdist's CHANGELOG names for this release, if any."""
    changelog = os.path.join(os.path.dirname(os.path.dirname(tree)), "CHANGELOG.md")
    try:
        with open(changelog) as f:
            for line in f:
                if "update llama.cpp to ggml-org/llama.cpp@" in line:
                    return line.strip().split("@")[-1]
    except OSError:
        pass
    return "unknown"


def ensure_built(version=DEFAULT_VERSION, jobs=2, cache=None, force=False, quiet=False):
    """Returns {"binary", "tree", "version", "commit", "build_seconds"}; raises Skipped."""
    root = cache_root(cache)
    build = os.path.join(root, f"llama.cpp-{version}", "build")
    binary = os.path.join(build, "bin", TARGET)
    tokenize = os.path.join(build, "bin", TOKENIZE)
    quantize = os.path.join(build, "bin", QUANTIZE)
    stamp = os.path.join(root, f"llama.cpp-{version}", "stamp.json")
    if (not force and all(os.access(p, os.X_OK) for p in (binary, tokenize, quantize))
            and os.path.exists(stamp)):
        with open(stamp) as f:
            info = json.load(f)
        if info.get("binary") == binary:
            return info
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise Skipped(f"`{tool}` not found (apt-get install cmake g++)")
    log = os.path.join(root, f"llama.cpp-{version}.log")
    if force and os.path.exists(log):
        os.remove(log)
    t0 = time.time()
    tree = source_tree(version, cache, log)
    if not quiet:
        print(f"llama.cpp: building {TARGET} from llama-cpp-python {version} "
              f"(-j{jobs}; log {log}) ...", file=sys.stderr, flush=True)
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    _run(["cmake", "-S", tree, "-B", build, *gen, "-DCMAKE_BUILD_TYPE=Release",
          "-DGGML_NATIVE=ON", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_OPENSSL=OFF",
          "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_TOOLS=ON",
          "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_BUILD_EXAMPLES=ON", "-DGGML_CCACHE=OFF"], log)
    _run(["cmake", "--build", build, "--target", TARGET, TOKENIZE, QUANTIZE, "-j", str(jobs)],
         log)
    for path in (binary, tokenize, quantize):
        if not os.access(path, os.X_OK):
            raise Skipped(f"build finished but {path} is missing; log {log}")
    previous = 0.0  # an earlier partial build (e.g. before a target was added) counts too
    if os.path.exists(stamp):
        with open(stamp) as f:
            previous = json.load(f).get("build_seconds", 0.0)
    info = {"binary": binary, "tokenize": tokenize, "quantize": quantize, "tree": tree,
            "version": version,
            "commit": upstream_commit(tree), "build_seconds": round(previous + time.time() - t0, 1),
            "jobs": jobs}
    with open(stamp, "w") as f:
        json.dump(info, f, indent=2)
    return info


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", default=os.environ.get("DLM_LLAMA_CPP_PYTHON", DEFAULT_VERSION),
                    help="llama-cpp-python release whose vendored llama.cpp is built")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("DLM_BENCH_JOBS", 2)))
    ap.add_argument("--cache", help="default $DLM_BENCH_CACHE or ~/.cache/dlm-bench")
    ap.add_argument("--force", action="store_true", help="rebuild even if cached")
    args = ap.parse_args()
    try:
        info = ensure_built(args.version, args.jobs, args.cache, args.force)
    except Skipped as e:
        print(f"llama.cpp: skipped: {e}", file=sys.stderr)
        return 3
    print(info["binary"])
    print(f"llama.cpp: llama-cpp-python {info['version']} (llama.cpp@{info['commit']}), "
          f"built in {info['build_seconds']} s with -j{info['jobs']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
