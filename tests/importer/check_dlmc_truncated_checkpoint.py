#!/usr/bin/env python3
"""A checkpoint truncated while `dlmc compile` reads it (issue 31).

dlmc maps the checkpoint's safetensors file when it opens it and reads the weights later (the
importer, the passes, the writer). Another program truncating the file meanwhile makes those reads
raise SIGBUS. dlmc must end with exit status 1 and an error naming the file, and leave neither an
artifact nor its temporary file behind.

The test starts dlmc, stops it (SIGSTOP) as soon as the file appears in its /proc/PID/maps, i.e.
after the open and before any weight has been copied out, truncates the file to its header, and
lets dlmc go on. It fails if dlmc got past the mapping's reads before it was stopped: that is a
compile that never saw the truncation, not a pass.
"""
import argparse
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time


def header_size(safetensors):
    with open(safetensors, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
    return 8 + length


def stop_when_mapped(process, path, deadline_s=60.0):
    """SIGSTOPs `process` as soon as `path` is mapped into it; False if it never was."""
    maps = f"/proc/{process.pid}/maps"
    start = time.monotonic()
    while time.monotonic() - start < deadline_s:
        try:
            with open(maps) as f:
                mapped = path in f.read()
        except OSError:
            return False  # exited
        if mapped:
            os.kill(process.pid, signal.SIGSTOP)
            return True
        if process.poll() is not None:
            return False
    return False


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dlmc", required=True)
    parser.add_argument("--checkpoint", required=True, help="a safetensors checkpoint directory")
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="dlm-truncated-")
    try:
        checkpoint = os.path.join(work, "checkpoint")
        shutil.copytree(args.checkpoint, checkpoint)
        weights = os.path.realpath(os.path.join(checkpoint, "model.safetensors"))
        output = os.path.join(work, "model.dlm")
        process = subprocess.Popen(
            [args.dlmc, "compile", checkpoint, "-o", output],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        stopped = stop_when_mapped(process, weights)
        if stopped:
            os.truncate(weights, header_size(weights))
            os.kill(process.pid, signal.SIGCONT)
        stdout, stderr = process.communicate(timeout=600)
        failures = []
        if not stopped:
            failures.append("dlmc ended before it mapped the checkpoint: nothing was tested")
        if process.returncode != 1:
            failures.append(f"exit status {process.returncode}, expected 1 (a negative status is "
                            "the signal that ended it)")
        expected = f"dlmc: error: '{weights}' shrank while dlmc read it"
        if expected not in stderr:
            failures.append(f"stderr does not say {expected!r}")
        left = sorted(os.listdir(work))
        if left != ["checkpoint"]:
            failures.append(f"files left beside the output: {left}")
        if failures:
            print("FAILED: a checkpoint truncated during dlmc compile:", file=sys.stderr)
            for failure in failures:
                print("  - " + failure, file=sys.stderr)
            print("dlmc's stderr:\n" + stderr[-4000:], file=sys.stderr)
            return 1
        print("ok: " + stderr.strip().splitlines()[-1])
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
