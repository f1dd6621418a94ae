"""A small CNN on scikit-learn's digits, for the fpga target's accuracy checks
(tests/python/test_fpga.py) and benchmarks/quant_eval.py.

Data: the 8x8 digits scaled to [0, 1], upsampled to 16x16 (bilinear), normalized to zero mean and
unit variance; a fixed stratified 75/25 train/test split (seed 0). Model: 3x3 conv, a depthwise +
1x1 block with a residual add, a strided 3x3 conv, max pool, global average pool and a linear
classifier — every layer type of the accelerator plus the CPU-only tail.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def load_digits_split(seed=0):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    x = F.interpolate(x, size=(16, 16), mode="bilinear", align_corners=False)
    x = (x - x.mean()) / x.std()
    y = torch.tensor(d.target, dtype=torch.long)
    idx = torch.arange(len(y)).numpy()
    tr, te = train_test_split(idx, test_size=0.25, random_state=seed, stratify=d.target)
    return x[tr], y[tr], x[te], y[te]


class DigitsNet(nn.Module):
    def __init__(self, width=32):
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv2d(1, w, 3, padding=1, bias=False), nn.BatchNorm2d(w), nn.ReLU())
        self.dw = nn.Sequential(nn.Conv2d(w, w, 3, padding=1, groups=w, bias=False), nn.BatchNorm2d(w), nn.ReLU6())
        self.pw = nn.Sequential(nn.Conv2d(w, w, 1, bias=False), nn.BatchNorm2d(w))
        self.down = nn.Sequential(nn.Conv2d(w, 2 * w, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(2 * w),
                                  nn.ReLU())
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(2 * w, 10)

    def forward(self, x):
        x = self.stem(x)
        x = F.relu(x + self.pw(self.dw(x)))
        x = self.pool(self.down(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def train(model, x, y, epochs=6, lr=3e-3, seed=0, batch=64):
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(len(y), generator=g)
        for i in range(0, len(y), batch):
            b = perm[i:i + batch]
            opt.zero_grad()
            F.cross_entropy(model(x[b]), y[b]).backward()
            opt.step()
    return model.eval()


def accuracy(fn, x, y, batch=256):
    with torch.no_grad():
        pred = torch.cat([fn(x[i:i + batch]).argmax(1) for i in range(0, len(y), batch)])
    return (pred == y).float().mean().item() * 100.0


def trained_model(seed=0, epochs=6):
    torch.manual_seed(seed)
    xtr, ytr, xte, yte = load_digits_split(seed)
    model = train(DigitsNet(), xtr, ytr, epochs=epochs, seed=seed)
    return model, (xtr, ytr, xte, yte)
