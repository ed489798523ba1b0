"""gradcomp's models and data, layer for layer, in PyTorch: the peer's side.

- `LeNet5`: Caffe's LeNet-5 (crates/train/src/models/lenet.rs).
- `ResNet18`: the CIFAR form (models/resnet.rs): 3×3 stem of 64 channels, no
  max-pool, four stages of two basic blocks, convolutions without bias,
  global average pooling, one linear layer; 11,173,962 parameters at 3×32×32
  and 10 classes (it takes the data's channels: 1 on the image stand-in).
- `LstmLm`: the 2-layer LSTM language model (models/lstm.rs): embedding,
  two LSTMs with a bias on both the input and the hidden transform (as burn's
  and torch's), a linear decoder, inverted dropout after the embedding and
  after each LSTM.
- `Gpt`: the decoder-only transformer language model (models/gpt.rs): token
  and learned position embeddings, pre-norm blocks (LayerNorm, causal
  self-attention from four linear layers with biases: query, key, value,
  output; LayerNorm, Linear → GELU → Linear), a final LayerNorm and a head
  tied to the token embedding or a Linear without bias; GPT-2's
  initialization (weights N(0, 0.02), biases 0); inverted dropout after the
  embeddings and on each residual branch. 5,752,320 parameters at the
  defaults (10k words, embed 256, 4 layers, MLP 1024, context 128, tied).

Data as gradcomp's loaders read it (crates/train/src/data): the IDX files of
MNIST and Fashion-MNIST scaled to [0, 1], Penn Treebank with gradcomp's
vocabulary (words by count, then alphabetically; `<eos>` per line) cut into
each worker's contiguous shard of `batch` rows.
"""
import gzip
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F


def data_dir():
    return os.environ.get("GRADCOMP_DATA", os.path.expanduser("~/.cache/gradcomp/data"))


def read_idx(path):
    data = open(path, "rb").read()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def idx_images(name, split):
    """(images [n, 1, h, w] in [0, 1], labels) of an IDX dataset's split ("train" or "t10k")."""
    root = os.path.join(data_dir(), name)
    files = {"images": f"{split}-images-idx3-ubyte", "labels": f"{split}-labels-idx1-ubyte"}
    paths = {}
    for kind, f in files.items():
        found = [os.path.join(root, c) for c in (f, f + ".gz") if os.path.exists(os.path.join(root, c))]
        if not found:
            sys.exit(f"error: {name} is not in {root}: run scripts/fetch-data.sh {name}")
        paths[kind] = found[0]
    x = torch.from_numpy(read_idx(paths["images"]).astype(np.float32) / 255.0).unsqueeze(1)
    y = torch.from_numpy(read_idx(paths["labels"]).astype(np.int64))
    return x, y


def ptb():
    """(train, test, vocabulary size) token ids of Penn Treebank, as gradcomp's `Vocabulary`."""
    root = os.path.join(data_dir(), "ptb")
    texts = {}
    for split in ("train", "test"):
        path = os.path.join(root, f"ptb.{split}.txt")
        if not os.path.exists(path):
            sys.exit(f"error: Penn Treebank is not in {root}: run scripts/fetch-data.sh ptb")
        texts[split] = open(path).read()
    counts = {}
    for line in texts["train"].splitlines():
        for w in line.split() + ["<eos>"]:
            counts[w] = counts.get(w, 0) + 1
    words = sorted(counts, key=lambda w: (-counts[w], w))
    if "<unk>" not in counts:
        words.append("<unk>")
    index = {w: i for i, w in enumerate(words)}
    unk = index["<unk>"]

    def encode(text):
        return torch.tensor([index.get(w, unk) for line in text.splitlines() for w in line.split() + ["<eos>"]],
                            dtype=torch.int64)

    return encode(texts["train"]), encode(texts["test"]), len(words)


def token_grid(tokens, rank, world, batch):
    """Worker `rank`'s contiguous shard cut into `batch` rows (gradcomp's `TokenLoader::shard`)."""
    per = len(tokens) // world
    shard = tokens[rank * per:(rank + 1) * per]
    cols = len(shard) // batch
    return shard[:batch * cols].view(batch, cols)


class LeNet5(torch.nn.Module):
    """Caffe's LeNet-5: conv 20@5×5, pool 2, conv 50@5×5, pool 2, fc 500, ReLU, fc 10."""

    def __init__(self, channels=1, classes=10, size=28):
        super().__init__()
        flat = 50 * (((size - 4) // 2 - 4) // 2) ** 2
        self.conv1, self.conv2 = torch.nn.Conv2d(channels, 20, 5), torch.nn.Conv2d(20, 50, 5)
        self.fc1, self.fc2 = torch.nn.Linear(flat, 500), torch.nn.Linear(500, classes)

    def forward(self, x):
        x = F.max_pool2d(self.conv1(x), 2)
        x = F.max_pool2d(self.conv2(x), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def conv(cin, cout, kernel, stride):
    return torch.nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False)


class BasicBlock(torch.nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1, self.bn1 = conv(cin, cout, 3, stride), torch.nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = conv(cout, cout, 3, 1), torch.nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = torch.nn.Sequential(conv(cin, cout, 1, stride), torch.nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class ResNet18(torch.nn.Module):
    def __init__(self, channels=3, classes=10, size=None):
        super().__init__()
        self.stem, self.stem_bn = conv(channels, 64, 3, 1), torch.nn.BatchNorm2d(64)
        blocks, cin = [], 64
        for stage, width in enumerate([64, 128, 256, 512]):
            blocks += [BasicBlock(cin, width, 1 if stage == 0 else 2), BasicBlock(width, width, 1)]
            cin = width
        self.blocks = torch.nn.Sequential(*blocks)
        self.fc = torch.nn.Linear(512, classes)

    def forward(self, x):
        x = self.blocks(torch.relu(self.stem_bn(self.stem(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class LstmLm(torch.nn.Module):
    def __init__(self, vocab, embed=200, hidden=200, dropout=0.2):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, embed)
        self.lstm1 = torch.nn.LSTM(embed, hidden, batch_first=True)
        self.lstm2 = torch.nn.LSTM(hidden, hidden, batch_first=True)
        self.decoder = torch.nn.Linear(hidden, vocab)
        self.dropout = dropout
        # burn's initialization, not torch's: burn 0.22 builds each gate from
        # two Linear layers (input and hidden), weights and biases drawn
        # XavierNormal(gain 1) over that layer's fan-in and fan-out; torch
        # draws U(±1/√H). With torch's, the same recipe trained markedly
        # slower (test perplexity 688 against 486 after 250 steps, one
        # process, the 4 workers' batches), so the two LSTMs were not the
        # same model. Embedding (N(0, 1)) and decoder (U(±1/√fan_in)) agree.
        for lstm in (self.lstm1, self.lstm2):
            for name, p in lstm.named_parameters():
                fan_in = lstm.input_size if name.endswith("ih_l0") else hidden
                torch.nn.init.normal_(p, 0.0, math.sqrt(2.0 / (fan_in + hidden)))

    def forward(self, tokens):
        h = F.dropout(self.embed(tokens), self.dropout, self.training)
        h = F.dropout(self.lstm1(h)[0], self.dropout, self.training)
        h = F.dropout(self.lstm2(h)[0], self.dropout, self.training)
        return self.decoder(h.reshape(-1, h.shape[-1]))


class GptBlock(torch.nn.Module):
    """x + attn(LN(x)), then x + MLP(LN(x)). Attention as burn's
    `MultiHeadAttention`: separate query, key, value and output projections
    (its parameters in that order), scores scaled by 1/√(embed/heads)."""

    def __init__(self, embed, heads, mlp, dropout):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.norm1 = torch.nn.LayerNorm(embed)
        self.query, self.key = torch.nn.Linear(embed, embed), torch.nn.Linear(embed, embed)
        self.value, self.output = torch.nn.Linear(embed, embed), torch.nn.Linear(embed, embed)
        self.norm2 = torch.nn.LayerNorm(embed)
        self.fc, self.proj = torch.nn.Linear(embed, mlp), torch.nn.Linear(mlp, embed)

    def attention(self, x):
        b, t, d = x.shape
        q, k, v = (lin(x).view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for lin in (self.query, self.key, self.value))
        # burn fills the masked scores with -1e4 where torch's causal mask
        # puts -inf: both are exactly 0 after the softmax in f32.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.output(y.transpose(1, 2).reshape(b, t, d))

    def forward(self, x):
        x = x + F.dropout(self.attention(self.norm1(x)), self.dropout, self.training)
        return x + F.dropout(self.proj(F.gelu(self.fc(self.norm2(x)))), self.dropout, self.training)


class Gpt(torch.nn.Module):
    def __init__(self, vocab, layers=4, heads=4, embed=256, mlp=None, context=128, dropout=0.0, tie=True):
        super().__init__()
        self.tokens = torch.nn.Embedding(vocab, embed)
        self.positions = torch.nn.Embedding(context, embed)
        self.blocks = torch.nn.ModuleList(GptBlock(embed, heads, mlp or 4 * embed, dropout) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(embed)
        self.head = None if tie else torch.nn.Linear(embed, vocab, bias=False)
        self.dropout = dropout
        # GPT-2's initialization, as models/gpt.rs draws it: every Linear and
        # Embedding weight N(0, 0.02), biases 0 (LayerNorm keeps 1 and 0).
        for m in self.modules():
            if isinstance(m, (torch.nn.Linear, torch.nn.Embedding)):
                torch.nn.init.normal_(m.weight, 0.0, 0.02)
                if getattr(m, "bias", None) is not None:
                    torch.nn.init.zeros_(m.bias)

    def forward(self, tokens):
        t = tokens.shape[1]
        h = F.dropout(self.tokens(tokens) + self.positions.weight[:t], self.dropout, self.training)
        for block in self.blocks:
            h = block(h)
        h = self.norm(h).reshape(-1, self.tokens.weight.shape[1])
        return self.head(h) if self.head is not None else F.linear(h, self.tokens.weight)


IMAGE_MODELS = {"lenet5": LeNet5, "resnet18": ResNet18}
IMAGE_DATA = {"mnist": "mnist", "fashion-mnist": "fashion-mnist"}


def build(cfg):
    """(model, task) for a gradcomp configuration: task is ("images", x, y, xt, yt)
    or ("tokens", train, test, vocab)."""
    name, dataset = cfg["model"]["name"], cfg["data"]["dataset"]
    if name in IMAGE_MODELS and dataset in IMAGE_DATA:
        x, y = idx_images(IMAGE_DATA[dataset], "train")
        xt, yt = idx_images(IMAGE_DATA[dataset], "t10k")
        n = cfg["data"].get("train_examples", 0)
        if n:
            x, y = x[:n], y[:n]
        n = cfg["data"].get("test_examples", 0)
        if n:
            xt, yt = xt[:n], yt[:n]
        model = IMAGE_MODELS[name](channels=x.shape[1], classes=int(y.max()) + 1, size=x.shape[-1])
        return model, ("images", x, y, xt, yt)
    if name in ("lstm", "gpt") and dataset == "ptb":
        train, test, vocab = ptb()
        n = cfg["data"].get("train_examples", 0)
        if n:
            train = train[:n]
        n = cfg["data"].get("test_examples", 0)
        if n:
            test = test[:n]
        if name == "lstm":
            lstm = cfg["model"].get("lstm", {})
            model = LstmLm(vocab, lstm.get("embed", 200), lstm.get("hidden", 200), lstm.get("dropout", 0.2))
        else:
            # gradcomp's defaults (config/model.rs's GptConfig) for unset sizes.
            gpt = {k: v for k, v in cfg["model"].get("gpt", {}).items() if k != "vocab"}
            model = Gpt(vocab, **gpt)
        return model, ("tokens", train, test, vocab)
    sys.exit(f"error: the peer trains lenet5 and resnet18 on mnist or fashion-mnist and the lstm and the gpt "
             f"on ptb, not {name} on {dataset}")
