"""PyTorch definitions of bumpgrad's networks, for side-by-side runs and
checkpoint interchange: one definition, used by every script here.

- `resnet(depth, classes, in_channels, width_mult)`: torchvision's ResNet
  layout (the same module names, so the same `state_dict` keys as
  `torchvision.models.resnet18/50`) with the CIFAR stem: a 3x3 convolution of
  stride 1 and no max-pool. BasicBlock [2, 2, 2, 2] or Bottleneck [3, 4, 6, 3]
  (stride in the 3x3 convolution, torchvision's v1.5), 1x1 convolution +
  batch-norm shortcuts where the shape changes, global average pool, linear.
- `squeezenet(classes, in_channels, width_mult)`: torchvision's
  `squeezenet1_1` with the first convolution 3x3, stride 1, padding 1.
- `SstLstm(vocab, classes, embed, hidden, layers)`: `sst-lstm`, a sentence
  classifier reading each sentence's hidden state at its last word.

- `TreeLstm(vocab, classes, embed, hidden)`: the binary constituency
  Tree-LSTM (Lantern's definition, `nn::TreeLstm` in bumpgrad) with an
  embedding and a classifier over every node; `read_tree(line)` parses an
  SST line into the post-order node list both sides walk. `forward` runs
  one node at a time, `forward_levels` every node of one height across a
  batch's trees at once (from the plan `plan_levels` makes): the same
  logits.

- `CharLM(vocab, embed, hidden, layers, cell)`: bumpgrad's `char-lstm`
  (`cell="lstm"`) and `char-rnn` (`cell="rnn"`, tanh): `encoder`
  (`nn.Embedding`), `rnn` (`nn.LSTM` / `nn.RNN`, time-major), `decoder`
  (`nn.Linear`), the names of bumpgrad's checkpoints. `embed=0` is
  `--embed 0`: no encoder, the tokens one-hot into `rnn` of
  `input_size=vocab`.

`width_mult` scales every channel count as bumpgrad's `--width-mult` does
(`max(1, round(c * w))`). Initialisation is torchvision's; bumpgrad draws
from the same distributions with its own generator.
"""

import torch
import torch.nn as nn


def scaled(channels, width_mult):
    # Python's round() rounds half to even, Rust's f32::round half away from
    # zero: floor(x + 0.5) is the latter for the positive values here.
    return max(1, int(channels * width_mult + 0.5))


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, c_in, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = shortcut(c_in, planes, stride)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, c_in, planes, stride):
        super().__init__()
        out = planes * 4
        self.conv1 = nn.Conv2d(c_in, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = shortcut(c_in, out, stride)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


def shortcut(c_in, c_out, stride):
    if stride == 1 and c_in == c_out:
        return None
    return nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))


class ResNet(nn.Module):
    def __init__(self, block, layers, classes=10, in_channels=3, width_mult=1.0):
        super().__init__()
        w = lambda c: scaled(c, width_mult)  # noqa: E731
        self.conv1 = nn.Conv2d(in_channels, w(64), 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(w(64))
        self.relu = nn.ReLU(inplace=True)
        c_in = w(64)
        for stage, count in enumerate(layers):
            planes = w(64 << stage)
            blocks = []
            for i in range(count):
                stride = 2 if stage > 0 and i == 0 else 1
                blocks.append(block(c_in, planes, stride))
                c_in = planes * block.expansion
            setattr(self, f"layer{stage + 1}", nn.Sequential(*blocks))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c_in, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet(depth, classes=10, in_channels=3, width_mult=1.0):
    if depth == 18:
        return ResNet(BasicBlock, [2, 2, 2, 2], classes, in_channels, width_mult)
    if depth == 50:
        return ResNet(Bottleneck, [3, 4, 6, 3], classes, in_channels, width_mult)
    raise ValueError(f"no ResNet-{depth} here; 18 or 50")


class Fire(nn.Module):
    def __init__(self, c_in, squeeze, expand):
        super().__init__()
        self.squeeze = nn.Conv2d(c_in, squeeze, 1)
        self.squeeze_activation = nn.ReLU(inplace=True)
        self.expand1x1 = nn.Conv2d(squeeze, expand, 1)
        self.expand1x1_activation = nn.ReLU(inplace=True)
        self.expand3x3 = nn.Conv2d(squeeze, expand, 3, padding=1)
        self.expand3x3_activation = nn.ReLU(inplace=True)

    def forward(self, x):
        x = self.squeeze_activation(self.squeeze(x))
        return torch.cat(
            [self.expand1x1_activation(self.expand1x1(x)), self.expand3x3_activation(self.expand3x3(x))], 1
        )


class SqueezeNet(nn.Module):
    def __init__(self, classes=10, in_channels=3, width_mult=1.0):
        super().__init__()
        w = lambda c: scaled(c, width_mult)  # noqa: E731
        pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, w(64), 3, 1, 1),
            nn.ReLU(inplace=True),
            pool(),
            Fire(w(64), w(16), w(64)),
            Fire(2 * w(64), w(16), w(64)),
            pool(),
            Fire(2 * w(64), w(32), w(128)),
            Fire(2 * w(128), w(32), w(128)),
            pool(),
            Fire(2 * w(128), w(48), w(192)),
            Fire(2 * w(192), w(48), w(192)),
            Fire(2 * w(192), w(64), w(256)),
            Fire(2 * w(256), w(64), w(256)),
        )
        final = nn.Conv2d(2 * w(256), classes, 1)
        self.classifier = nn.Sequential(nn.Dropout(0.5), final, nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                if m is final:
                    nn.init.normal_(m.weight, mean=0.0, std=0.01)
                else:
                    nn.init.kaiming_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.constant_(m.bias, 0)

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


def squeezenet(classes=10, in_channels=3, width_mult=1.0):
    return SqueezeNet(classes, in_channels, width_mult)


class SstLstm(nn.Module):
    """bumpgrad's `sst-lstm`: embedding -> LSTM -> linear from each sentence's
    hidden state at its own last word (`embedding.weight`, `rnn.weight_ih_l0`,
    `rnn.weight_hh_l0`, `rnn.bias_ih_l0`, `rnn.bias_hh_l0`, `fc.weight`,
    `fc.bias`: a bumpgrad checkpoint loads with `strict=True`).

    `forward(tokens, lengths)`: `tokens` [T, B] right-padded word ids (time
    major), `lengths` [B] (each at least 1) -> logits [B, classes]. The
    padding after a sentence is run and never read, as in bumpgrad; a model
    trained with packed sequences (`nn.utils.rnn.pack_padded_sequence`)
    gives the same logits.
    """

    def __init__(self, vocab, classes=5, embed=300, hidden=150, layers=1):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        self.rnn = nn.LSTM(embed, hidden, layers)  # gates i, f, g, o; batch_first=False
        self.fc = nn.Linear(hidden, classes)

    def forward(self, tokens, lengths):
        y, _ = self.rnn(self.embedding(tokens))
        last = y[lengths - 1, torch.arange(tokens.shape[1], device=tokens.device)]
        return self.fc(last)


class CharLM(nn.Module):
    """Embedding (or one-hot) -> LSTM or tanh RNN -> linear, over `[T, B]`
    token ids; returns the `[T*B, vocab]` logits and the final state."""

    def __init__(self, vocab, embed, hidden, layers, cell="lstm"):
        super().__init__()
        self.vocab, self.hidden = vocab, hidden
        self.encoder = nn.Embedding(vocab, embed) if embed else None
        rnn = nn.LSTM if cell == "lstm" else nn.RNN
        self.rnn = rnn(embed or vocab, hidden, layers)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, ids, state=None):
        if self.encoder is None:
            x = nn.functional.one_hot(ids, self.vocab).to(self.decoder.weight.dtype)
        else:
            x = self.encoder(ids)
        y, state = self.rnn(x, state)
        return self.decoder(y.reshape(-1, self.hidden)), state


def build(name, classes=10, in_channels=3, width_mult=1.0):
    """The network `bumpgrad --model NAME --width-mult W` trains."""
    if name == "resnet18":
        return resnet(18, classes, in_channels, width_mult)
    if name == "resnet50":
        return resnet(50, classes, in_channels, width_mult)
    if name == "squeezenet":
        return squeezenet(classes, in_channels, width_mult)
    raise ValueError(f"unknown model {name!r}: resnet18, resnet50 or squeezenet")


def read_tree(line):
    """An SST tree line as `(words, nodes)`: `nodes` in post-order (children
    before their parent, the root last), each `(label, word_index, None,
    None)` for a leaf or `(label, None, left, right)` for an inner node,
    children by their index in `nodes` (bumpgrad's `Tree`)."""
    words, nodes, pos = [], [], 0

    def node():
        nonlocal pos
        assert line[pos] == "("
        label = int(line[pos + 1])
        pos += 3  # "(", the label, one space
        if line[pos] == "(":
            left = node()
            pos += 1  # the space between the subtrees
            right = node()
            nodes.append((label, None, left, right))
        else:
            end = line.index(")", pos)
            words.append(line[pos:end].rstrip())
            nodes.append((label, len(words) - 1, None, None))
            pos = end
        assert line[pos] == ")"
        pos += 1
        return len(nodes) - 1

    node()
    return words, nodes


class TreeCell(nn.Module):
    """bumpgrad's `nn::TreeLstm`: `leaf` (`nn.Linear(embed, 3H)`, gates
    i, o, u), `left`, `right` (`[5H, H]`) and `bias` (`[5H]`) for an inner
    node's gates i, f_l, f_r, o, u."""

    def __init__(self, embed, hidden):
        super().__init__()
        self.hidden = hidden
        self.leaf = nn.Linear(embed, 3 * hidden)
        bound = (2 * hidden) ** -0.5
        self.left = nn.Parameter(torch.empty(5 * hidden, hidden).uniform_(-bound, bound))
        self.right = nn.Parameter(torch.empty(5 * hidden, hidden).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(5 * hidden).uniform_(-bound, bound))

    def leaf_state(self, x):
        i, o, u = self.leaf(x).chunk(3, dim=-1)
        c = torch.sigmoid(i) * torch.tanh(u)
        return torch.sigmoid(o) * torch.tanh(c), c

    def inner_state(self, left, right):
        (h_l, c_l), (h_r, c_r) = left, right
        gates = h_l @ self.left.T + self.bias + h_r @ self.right.T
        i, f_l, f_r, o, u = gates.chunk(5, dim=-1)
        c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(f_l) * c_l + torch.sigmoid(f_r) * c_r
        return torch.sigmoid(o) * torch.tanh(c), c


class TreeLstm(nn.Module):
    """`embedding` -> `tree` (`TreeCell`) over each tree's nodes in
    post-order -> `fc` on every node's h. `forward(trees)` takes
    `[(word_ids, nodes)]` (`nodes` as `read_tree` gives them, `word_ids` a
    LongTensor of the leaves' ids) and returns the logits of every node,
    tree by tree in post-order, `[sum(nodes), classes]`."""

    def __init__(self, vocab, classes=5, embed=300, hidden=150):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        self.tree = TreeCell(embed, hidden)
        self.fc = nn.Linear(hidden, classes)

    def forward(self, trees):
        hs = []
        for word_ids, nodes in trees:
            x = self.embedding(word_ids)
            states = []
            for _, word, left, right in nodes:
                if word is not None:
                    states.append(self.tree.leaf_state(x[word]))
                else:
                    states.append(self.tree.inner_state(states[left], states[right]))
            hs.extend(h for h, _ in states)
        return self.fc(torch.stack(hs))

    def forward_levels(self, trees):
        """`forward`'s logits, computed level by level as TensorFlow Fold and
        DyNet batch trees (bumpgrad's `--tree-batching levels`): every leaf
        of every tree in one embedding and one `leaf_state`, then for each
        height one gather of the children's states and one `inner_state`,
        and the rows put back in post-order by one index. `trees` as
        `forward` takes them, or their `plan_levels` made beforehand (on
        this model's device), which leaves no host work in the step."""
        plan = trees if isinstance(trees, LevelPlan) else plan_levels(trees, self.fc.weight.device)
        h, c = self.tree.leaf_state(self.embedding(plan.words))
        # The states so far grow by one concatenation per level rather than
        # being written into a preallocated table: no in-place write for
        # autograd to track, for one copy of the table per level (about
        # 18 MB a step for 25 of SST's sentences, 18 levels: microseconds
        # on a GPU, a millisecond or two on one CPU core).
        for children in plan.levels:
            n = children.shape[0] // 2
            h_kids, c_kids = h.index_select(0, children), c.index_select(0, children)
            h_k, c_k = self.tree.inner_state((h_kids[:n], c_kids[:n]), (h_kids[n:], c_kids[n:]))
            h, c = torch.cat([h, h_k]), torch.cat([c, c_k])
        return self.fc(h.index_select(0, plan.post_order))


class LevelPlan:
    """What `TreeLstm.forward_levels` reads, made once per batch by
    `plan_levels`. Rows are numbered in level order: the leaves first (tree
    by tree, each in sentence order), then the nodes of height 1 (tree by
    tree, each in post-order), and so on up (bumpgrad's `nn::Forest`).

    - `words`: every leaf's word id in level order, `[leaves]`;
    - `levels`: for each height from 1, its nodes' left children then
      their right children, by level-order row, `[2 * nodes of the level]`;
    - `post_order`: each node's level-order row, tree by tree in
      post-order, `[sum(nodes)]`.
    """

    def __init__(self, words, levels, post_order):
        self.words, self.levels, self.post_order = words, levels, post_order


def plan_levels(trees, device):
    """The `LevelPlan` of `trees` (`[(word_ids, nodes)]`, as
    `TreeLstm.forward` takes them), its index tensors on `device`."""
    leaf_words, heights, children = [], [], []
    for word_ids, nodes in trees:
        ids = word_ids.tolist()
        first = len(heights)
        for _, word, left, right in nodes:
            if word is not None:
                leaf_words.append(ids[word])
                heights.append(0)
                children.append(None)
            else:
                heights.append(1 + max(heights[first + left], heights[first + right]))
                children.append((first + left, first + right))
    by_height = [[] for _ in range(max(heights) + 1)]
    for k, height in enumerate(heights):
        by_height[height].append(k)
    row = [0] * len(heights)
    for r, k in enumerate(k for members in by_height for k in members):
        row[k] = r
    levels = []
    for members in by_height[1:]:
        left = [row[children[k][0]] for k in members]
        right = [row[children[k][1]] for k in members]
        levels.append(torch.tensor(left + right, dtype=torch.long, device=device))
    # The leaves' words were collected tree by tree in post-order, the order
    # of height 0's rows.
    return LevelPlan(torch.tensor(leaf_words, dtype=torch.long, device=device), levels,
                     torch.tensor(row, dtype=torch.long, device=device))


def save_step(out, weights, step, model):
    """A PyTorch step fixture for the Rust tests: `weights` as
    `weights.safetensors`, and `step` (inputs, loss, outputs) with
    `grad.<name>` of every parameter of `model` (after its float64
    `backward`), in float32, as `step.safetensors`, both under `out`."""
    from pathlib import Path

    from safetensors.torch import save_file

    for name, p in model.named_parameters():
        step[f"grad.{name}"] = p.grad.float().contiguous()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(out / "weights.safetensors"))
    save_file(step, str(out / "step.safetensors"))
    return out
