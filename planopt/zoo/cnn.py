"""VGG-16 and ResNet-50 (torchvision layouts, 224x224 ImageNet) as layer groups."""

from __future__ import annotations

from planopt.zoo import ops
from planopt.zoo.chain import Group, Network, single
from planopt.zoo.tensors import FP16, INT64, Op, Tensor

_VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


def _images(batch: int, size: int) -> tuple[Tensor, Tensor]:
    images = Tensor("images", (batch, 3, size, size), FP16, static=True)
    labels = Tensor("labels", (batch,), INT64, static=True)
    return images, labels


def vgg16(batch: int, *, image: int = 224) -> Network:
    """VGG-16: each conv with its in-place ReLU is one layer (they share one tensor).

    Layers: 13 conv+relu, 5 max-pools, the adaptive average pool (7x7 -> 7x7,
    still a separate op that saves its input), fc6 and fc7 each with ReLU and
    dropout, and fc8 with the loss: 22 layers.
    """
    images, labels = _images(batch, image)
    groups: list[Group] = []
    x = images
    stage, index = 1, 1
    for item in _VGG16:
        if item == "M":
            pool = ops.maxpool2d(f"pool{stage}", x, 2, 2)
            groups.append(single(pool))
            x = pool.out
            stage, index = stage + 1, 1
            continue
        name = f"conv{stage}_{index}"
        conv = ops.conv2d(name, x, int(item), 3, bias=True)
        act = ops.relu(f"{name}.relu", conv.out)
        groups.append(Group(f"{name}+relu", (conv, act)))
        x = act.out
        index += 1
    avg = ops.adaptive_avgpool("avgpool", x, 7)
    groups.append(single(avg))
    x = ops.flatten(avg.out)
    for name in ("fc6", "fc7"):
        fc = ops.linear(name, x, 4096)
        act = ops.relu(f"{name}.relu", fc.out)
        drop = ops.dropout(f"{name}.dropout", act.out)
        groups.append(Group(f"{name}+relu+dropout", (fc, act, drop)))
        x = drop.out
    fc8 = ops.linear("fc8", x, 1000)
    loss = ops.cross_entropy("loss", fc8.out)
    groups.append(Group("fc8+loss", (fc8, loss)))
    return Network(
        name="vgg16",
        description=f"torchvision VGG-16, batch {batch}, {image}x{image} images, conv+ReLU merged",
        groups=tuple(groups),
        batch_inputs=(images, labels),
    )


# (bottleneck width, blocks, stride of the first block) per stage; expansion 4
_RESNET50 = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))


def bottleneck(prefix: str, x: Tensor, width: int, stride: int) -> tuple[list[Op], Tensor]:
    """torchvision Bottleneck (v1.5: stride on the 3x3 conv), ops in execution order."""
    out_ch = 4 * width
    seq: list[Op] = []
    h = x
    for j, (k, ch, s) in enumerate(((1, width, 1), (3, width, stride), (1, out_ch, 1)), start=1):
        conv = ops.conv2d(f"{prefix}.conv{j}", h, ch, k, stride=s)
        bn = ops.batchnorm(f"{prefix}.bn{j}", conv.out)
        seq += [conv, bn]
        h = bn.out
        if j < 3:
            act = ops.relu(f"{prefix}.relu{j}", h)
            seq.append(act)
            h = act.out
    identity = x
    if stride != 1 or x.shape[1] != out_ch:
        conv = ops.conv2d(f"{prefix}.downsample.conv", x, out_ch, 1, stride=stride)
        bn = ops.batchnorm(f"{prefix}.downsample.bn", conv.out)
        seq += [conv, bn]
        identity = bn.out
    join = ops.add(f"{prefix}.add", h, identity)
    act = ops.relu(f"{prefix}.relu3", join.out)
    seq += [join, act]
    return seq, act.out


def resnet50(batch: int, *, per_operator: bool, image: int = 224) -> Network:
    """ResNet-50 as stem + 16 bottleneck blocks + head, or one layer per operator.

    Both variants hold the same operators, so their totals (times, saved
    bytes) agree; only the granularity of the chain differs.
    """
    images, labels = _images(batch, image)
    groups: list[Group] = []
    conv = ops.conv2d("stem.conv", images, 64, 7, stride=2, pad=3)
    bn = ops.batchnorm("stem.bn", conv.out)
    act = ops.relu("stem.relu", bn.out)
    pool = ops.maxpool2d("stem.maxpool", act.out, 3, 2, 1)
    stem = [conv, bn, act, pool]
    if per_operator:
        groups += [single(op) for op in stem]
    else:
        groups.append(Group("stem", tuple(stem)))
    x = pool.out
    in_ch = 64
    for stage, (width, blocks, stride) in enumerate(_RESNET50, start=2):
        for b in range(blocks):
            s = stride if b == 0 else 1
            prefix = f"conv{stage}_{b + 1}"
            h, w = x.shape[2:]
            seq, x = bottleneck(prefix, x, width, s)
            if per_operator:
                groups += [single(op) for op in seq]
            else:
                sig = f"bottleneck({in_ch}->{width}->{4 * width},s{s})[{batch}x{in_ch}x{h}x{w}]"
                groups.append(Group(prefix, tuple(seq), sig))
            in_ch = 4 * width
    avg = ops.adaptive_avgpool("avgpool", x, 1)
    fc = ops.linear("fc", ops.flatten(avg.out), 1000)
    loss = ops.cross_entropy("loss", fc.out)
    head = [avg, fc, loss]
    if per_operator:
        groups += [single(op) for op in head]
    else:
        groups.append(Group("head", tuple(head)))
    grain = (
        "one layer per operator (conv, bn, relu, add...)"
        if per_operator
        else ("stem, 16 bottleneck blocks, head as layers")
    )
    return Network(
        name="resnet50",
        description=f"torchvision ResNet-50 v1.5, batch {batch}, {image}x{image} images, {grain}",
        groups=tuple(groups),
        batch_inputs=(images, labels),
    )
