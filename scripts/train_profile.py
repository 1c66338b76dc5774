"""Where the GPU time of a training run goes, from a torch.profiler trace.

`scripts/bench_train.py --profile PATH` records the measured steps with
torch.profiler (Kineto/CUPTI: every kernel in the process, nvJPEG's and
Stoker's included) and writes `summarize(...)`'s figures to PATH as JSON;
`scripts/profile-train.sh` prints `table(...)` of two such runs (synthetic
and a Stoker case) side by side.

Kernels are sorted by name: `stoker_*` are Stoker's (cuda/src/*.cu),
names with "nvjpeg" in them nvJPEG's, the rest the training step's (torch,
cuDNN, cuBLAS). Copies and memsets are counted apart. The GPU is idle where
no kernel, copy or memset of the process runs.

usage: train_profile.py SYNTHETIC.json CASE.json   (prints the table)
"""

import json
import sys


def kind_of(event):
    """'stoker', 'nvjpeg', 'train', 'copy', or None for host events."""
    cat, name = event.get("cat", ""), event.get("name", "")
    if cat == "kernel":
        if name.startswith("stoker_"):
            return "stoker"
        if "nvjpeg" in name.lower():
            return "nvjpeg"
        return "train"
    if cat in ("gpu_memcpy", "gpu_memset"):
        return "copy"
    return None


def busy_time(intervals):
    """Total length of the union of (start, end) intervals."""
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def summarize(trace_path, steps, images, by_role=None):
    """The figures of one profiled run: `steps` training steps of `images`
    images in all, from the Chrome trace torch.profiler exported; `by_role`:
    the last epoch's samples by worker role ({"gpu": n, "cpu": n}), where
    known."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    gpu = [e for e in events if e.get("ph") == "X" and kind_of(e) is not None]
    if not gpu:
        return {"error": "no GPU activity in the trace"}
    spans = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in gpu]
    start, end = min(s for s, _ in spans), max(e for _, e in spans)
    window = end - start
    busy = busy_time(spans)
    kernels = {}
    totals = {"stoker": 0.0, "nvjpeg": 0.0, "train": 0.0, "copy": 0.0}
    for e in gpu:
        kind, dur = kind_of(e), float(e.get("dur", 0))
        totals[kind] += dur
        if kind in ("stoker", "nvjpeg"):
            k = kernels.setdefault(e["name"], {"kind": kind, "launches": 0, "us": 0.0})
            k["launches"] += 1
            k["us"] += dur
    # The training step's heaviest kernels, to check the sorting by name.
    train_top = {}
    for e in gpu:
        if kind_of(e) == "train":
            train_top[e["name"]] = train_top.get(e["name"], 0.0) + float(e.get("dur", 0))
    top = sorted(train_top.items(), key=lambda kv: -kv[1])[:5]
    return {
        "steps": steps,
        "images": images,
        "window_ms": window / 1e3,
        "gpu_idle_fraction": 1.0 - busy / window if window > 0 else 0.0,
        "train_kernel_ms_per_step": totals["train"] / 1e3 / steps,
        "stoker_kernel_us_per_image": totals["stoker"] / images,
        "nvjpeg_kernel_us_per_image": totals["nvjpeg"] / images,
        "copy_us_per_image": totals["copy"] / images,
        "cuda": {name: {**k, "us_per_image": k["us"] / images, "launches_per_step": k["launches"] / steps}
                    for name, k in sorted(kernels.items(), key=lambda kv: -kv[1]["us"])},
        "train_top": [{"name": n[:80], "ms_per_step": us / 1e3 / steps} for n, us in top],
        "by_role": by_role,
    }


def table(synthetic, case, label="stoker"):
    """The profile table (markdown) of a Stoker run beside synthetic."""
    lines = [
        f"| | synthetic | {label} |",
        "| --- | ---: | ---: |",
        f"| training step's kernels, ms per step | {synthetic['train_kernel_ms_per_step']:.2f} "
        f"| {case['train_kernel_ms_per_step']:.2f} |",
        f"| GPU idle (no kernel, copy or memset) | {100 * synthetic['gpu_idle_fraction']:.1f}% "
        f"| {100 * case['gpu_idle_fraction']:.1f}% |",
        f"| Stoker's kernels, µs per image | - | {case['stoker_kernel_us_per_image']:.1f} |",
        f"| nvJPEG's kernels, µs per image | - | {case['nvjpeg_kernel_us_per_image']:.1f} |",
        f"| copies and memsets, µs per image | {synthetic['copy_us_per_image']:.2f} "
        f"| {case['copy_us_per_image']:.2f} |",
    ]
    lines += ["", "| kernel | launches per step | µs per image |", "| --- | ---: | ---: |"]
    for name, k in case["cuda"].items():
        lines.append(f"| `{name[:60]}` ({k['kind']}) | {k['launches_per_step']:.1f} | {k['us_per_image']:.2f} |")
    roles = case.get("by_role")
    if roles:
        total = sum(roles.values())
        lines += ["", "| the last epoch's samples, by worker | count | share |", "| --- | ---: | ---: |"]
        for role, n in sorted(roles.items()):
            lines.append(f"| {role} worker | {n} | {100 * n / max(total, 1):.1f}% |")
    return "\n".join(lines)


def main():
    synthetic, case = (json.load(open(p)) for p in sys.argv[1:3])
    print(table(synthetic, case, sys.argv[3] if len(sys.argv) > 3 else "stoker"))


if __name__ == "__main__":
    main()
