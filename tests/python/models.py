"""Small models used by the training tests and benchmarks."""
import torch
import torch.nn as nn


class MLP(nn.Module):
    def __init__(self, d_in=32, hidden=64, classes=10):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.GELU(), nn.Linear(hidden, hidden),
                                 nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x):
        return self.net(x)


class SmallCNN(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2, bias=False), nn.BatchNorm2d(16), nn.SiLU(),
            nn.AvgPool2d(2), nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(16, classes)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


class TinyTransformer(nn.Module):
    """Token embedding + positional embedding, two pre-norm encoder layers
    (PyTorch's own TransformerEncoderLayer, causal mask), LM head."""

    def __init__(self, vocab=50, d_model=32, heads=4, layers=2, seq=16, dropout=0.0):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=4 * d_model,
                                           dropout=dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)
        self.seq = seq

    def forward(self, ids):
        n = ids.shape[1]
        pos = torch.arange(n, device=ids.device)
        h = self.tok(ids) + self.pos(pos)
        mask = torch.triu(torch.full((n, n), float("-inf"), device=ids.device), diagonal=1)
        h = self.encoder(h, mask=mask, is_causal=True)
        return self.head(self.norm(h))


def make_batch(kind, step, batch=8):
    g = torch.Generator().manual_seed(1000 + step)
    if kind == "mlp":
        return torch.randn(batch, 32, generator=g), torch.randint(0, 10, (batch,), generator=g)
    if kind == "cnn":
        return torch.randn(batch, 3, 16, 16, generator=g), torch.randint(0, 10, (batch,), generator=g)
    ids = torch.randint(0, 50, (batch, 16), generator=g)
    return ids, torch.roll(ids, -1, dims=1)


def make_model(kind):
    torch.manual_seed(0)
    return {"mlp": MLP, "cnn": SmallCNN, "transformer": TinyTransformer}[kind]()


def loss_of(kind, out, labels):
    if kind == "transformer":
        return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), labels.reshape(-1))
    return nn.functional.cross_entropy(out, labels)
