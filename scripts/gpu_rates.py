"""The GPU's measured ceilings for gpu-check: device-to-device copy bandwidth (bytes read plus
bytes written per second) and the bf16 matrix product rate on random data, through PyTorch (which
the GPU machine has; dlm itself does not use it). Prints one JSON object, and nothing else, on
stdout.

Each figure is the median of 10 timed repetitions (CUDA events) after 3 warm-ups; the copy moves
4 GiB each way, several times the L2, and the product is 8192 x 8192 x 8192.
"""

import json
import statistics

import torch


def timed(fn, repeats=10, warmups=3):
    for _ in range(warmups):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def main():
    props = torch.cuda.get_device_properties(0)
    src = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    src.fill_(1)
    copy_seconds = timed(lambda: dst.copy_(src))
    del src, dst
    n = 8192
    a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    gemm_seconds = timed(lambda: torch.mm(a, b))
    print(json.dumps({
        "gpu": props.name,
        "multiprocessors": props.multi_processor_count,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "copy_bandwidth_gb_per_s": round(2 * (4 << 30) / copy_seconds / 1e9, 1),
        "bf16_gemm_tflop_per_s": round(2 * n**3 / gemm_seconds / 1e12, 1),
        "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
