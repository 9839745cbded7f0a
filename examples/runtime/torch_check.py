"""torch_check.py - a PyTorch training run whose losses are compared bit
for bit between a plain run and a run under the Tally runtime.

It exercises PyTorch's own kernels (which tally-opt never saw: they run as
they are under the runtime, through the cuGetProcAddress/dlsym paths the
CUDA runtime and the CUDA libraries take) and cuBLAS/cuDNN: a small conv
net trained eagerly for 20 steps (argument: the step count) on synthetic
data with deterministic algorithms, a fixed seed and one stream. Every
step prints its loss as exact float hex; a checksum of the trained
parameters ends the output.
"""
import os

# Before torch (and cuBLAS) is loaded: deterministic cuBLAS workspaces.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import hashlib  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.norm = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * 8 * 8, 256)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.norm(self.conv2(x))), 2)
        x = torch.flatten(x, 1)
        return self.fc2(F.gelu(self.fc1(x)))


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    if not torch.cuda.is_available():
        print("torch_check: no CUDA device", file=sys.stderr)
        return 1
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")

    model = Net().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    gen = torch.Generator(device="cpu").manual_seed(1234)
    # Synthetic data with a learnable rule: the class is set by which
    # quadrant of the image is brightest, plus noise.
    images = torch.randn(512, 3, 32, 32, generator=gen)
    labels = torch.randint(0, 10, (512,), generator=gen)
    for i in range(512):
        q = int(labels[i]) % 4
        images[i, :, (q // 2) * 16:(q // 2) * 16 + 16, (q % 2) * 16:(q % 2) * 16 + 16] += (
            0.5 + 0.1 * int(labels[i]))
    images, labels = images.to(dev), labels.to(dev)

    for step in range(steps):
        lo = (step * 64) % 512
        x, y = images[lo:lo + 64], labels[lo:lo + 64]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        value = loss.item()
        print(f"step {step} loss {value.hex()}")
    torch.cuda.synchronize()
    h = hashlib.sha256()
    for name, p in model.state_dict().items():
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    print(f"parameters {h.hexdigest()[:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
