"""A tiny PyTorch training job that checkpoints when gpuqueue preempts it and resumes after.

Runs on the CPU by default and on a GPU when one is present. Under gpuqueue on Kubernetes:

    image: pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
           (plus this file and gpuqueue/client/workload.py)
    command: ["python", "train_checkpoint.py", "--steps", "20000", "--dir", "/checkpoints"]

`--dir` must outlive the pod (a PersistentVolumeClaim or an object-store mount), since the next
attempt may run on other nodes. With several workers (WORLD_SIZE > 1) it trains with
DistributedDataParallel through the MASTER_ADDR/MASTER_PORT/RANK gpuqueue sets; rank 0 saves
and acknowledges. Not imported by the tests: torch is not a gpuqueue dependency.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
from torch import nn

try:
    from gpuqueue.client import workload
except ImportError:  # copied next to this script in the image
    import workload  # type: ignore[no-redef]


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))


def batch(device: torch.device, size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(size, 32, device=device)
    return x, x.sum(dim=1, keepdim=True).sin()  # something learnable


def save(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    """Write to a temporary name, then rename: a kill in the middle leaves the old checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    torch.save(
        {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, partial
    )
    partial.replace(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument(
        "--dir", default=os.environ.get("CHECKPOINT_DIR", "/tmp/gpuqueue-checkpoints")
    )
    parser.add_argument("--every", type=int, default=500, help="also save every N steps")
    args = parser.parse_args()

    # 1. Device and, with several workers, the process group gpuqueue's environment describes.
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    model: nn.Module = build_model().to(device)
    if world > 1:
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    # 2. Resume where the previous attempt saved, if this is a resumed attempt.
    start = 0
    if resume := workload.resume_from():
        state = torch.load(resume, map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
        print(f"attempt {workload.attempt()}: resuming from {resume} at step {start}", flush=True)

    # 3. Train; a SIGTERM (the grace period started) counts as a checkpoint request too.
    workload.install_sigterm_hook()
    job = os.environ.get("GPUQUEUE_JOB_ID", "local")
    path = Path(args.dir) / f"job-{job}" / "latest.pt"
    for step in range(start, args.steps):
        x, y = batch(device)
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        # 4. Asked to stop: save, acknowledge (rank 0 speaks for the gang), exit cleanly.
        if workload.checkpoint_requested():
            if rank == 0:
                save(path, model, optimizer, step + 1)
                if os.environ.get("GPUQUEUE_JOB_TOKEN"):
                    workload.acknowledge(str(path))
                print(f"checkpointed at step {step + 1} to {path}", flush=True)
            return 0
        if rank == 0 and (step + 1) % args.every == 0:
            save(path, model, optimizer, step + 1)
            print(f"step {step + 1}: loss {loss.item():.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
