"""torch_reference.py: the same SimpleCNN training step in PyTorch eager, for comparison
with bench_cnn (same model, loss, AdamW settings, GradScaler; random data).

Prints the median step time over back-to-back steps from CUDA events, like bench_cnn's
"step ms" column. Needs a CUDA build of PyTorch; not part of the build or the tests.

usage: python3 bench/cnn/torch_reference.py [--batch 64] [--steps 200] [--warmup 20]
"""
import argparse
import statistics

import torch
import torch.nn as nn
import torch.nn.functional as F


class SimpleCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.conv3 = nn.Conv2d(64, 128, 3, padding=1)
        self.fc = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.conv3(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def run(batch, amp, steps, warmup):
    dev = torch.device("cuda")
    model = SimpleCNN().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
    scaler = torch.amp.GradScaler("cuda", enabled=amp)
    x = torch.randn(batch, 3, 32, 32, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for _ in range(warmup):
        step()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    torch.cuda.synchronize()
    events[0].record()
    for i in range(steps):
        step()
        events[i + 1].record()
    torch.cuda.synchronize()
    times = [events[i].elapsed_time(events[i + 1]) for i in range(steps)]
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    a = ap.parse_args()
    name = torch.cuda.get_device_name()
    print(f"torch {torch.__version__} on {name}, cudnn.benchmark={torch.backends.cudnn.benchmark}")
    for amp in (False, True):
        ms = run(a.batch, amp, a.steps, a.warmup)
        print(f"| PyTorch eager | {a.batch} | {'on' if amp else 'off'} | {ms:.3f} |")


if __name__ == "__main__":
    main()
