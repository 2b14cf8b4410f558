"""ResNet-50 and VGG-16 exactly as torchvision builds them, as chains, without torchvision.

NOTE (why not import torchvision): the `torchvision` wheel on the package
index is a CUDA build and fails at import with a CPU-only torch (`operator
torchvision::nms does not exist`). The two architectures are written here
with torchvision's module names and hyper-parameters (ResNet v1.5
bottlenecks, stride on the 3x3 convolution; VGG configuration D with in-place
ReLUs and the 7x7 adaptive pool), so a torchvision `state_dict` loads into
them unchanged; the tests do exactly that where torchvision imports.

Chained by natural blocks: ResNet-50 as its stem (conv, BN, ReLU, max-pool),
its 16 bottlenecks and its head (pool, fc); VGG-16 as each conv-ReLU, each
max-pool, and the three classifier layers (the first with the adaptive pool).
"""

from __future__ import annotations

from torch import Tensor, nn

from planopt.runtime.chain import Chain


class Bottleneck(nn.Module):
    """torchvision.models.resnet.Bottleneck (expansion 4, stride on the 3x3 conv)."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        width = planes
        self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or inplanes != planes * self.expansion:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes * self.expansion, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * self.expansion),
            )

    def forward(self, x: Tensor) -> Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet50(nn.Module):
    """torchvision.models.resnet50(): layers [3, 4, 6, 3], 1000 classes, its initialisation."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        inplanes = 64
        for index, (planes, blocks, stride) in enumerate(
            ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)), start=1
        ):
            layer = []
            for b in range(blocks):
                layer.append(Bottleneck(inplanes, planes, stride if b == 0 else 1))
                inplanes = planes * Bottleneck.expansion
            setattr(self, f"layer{index}", nn.Sequential(*layer))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * Bottleneck.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x: Tensor) -> Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x).flatten(1))


def resnet50_chain(model: ResNet50) -> Chain:
    """Stem, the 16 bottlenecks (`layer1.0` .. `layer4.2`), head; over `model`'s modules."""
    layers: dict[str, nn.Module] = {
        "stem": nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool)
    }
    for index in range(1, 5):
        for b, block in enumerate(getattr(model, f"layer{index}")):
            layers[f"layer{index}.{b}"] = block
    layers["head"] = nn.Sequential(model.avgpool, nn.Flatten(1), model.fc)
    return Chain.from_modules(layers)


VGG16_CFG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


class VGG16(nn.Module):
    """torchvision.models.vgg16(): configuration D, no batch norm, dropout 0.5, its init."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        features: list[nn.Module] = []
        c_in = 3
        for v in VGG16_CFG:
            if v == "M":
                features.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                features += [nn.Conv2d(c_in, v, kernel_size=3, padding=1), nn.ReLU(inplace=True)]
                c_in = v
        self.features = nn.Sequential(*features)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096),
            nn.ReLU(True),
            nn.Dropout(p=dropout),
            nn.Linear(4096, 4096),
            nn.ReLU(True),
            nn.Dropout(p=dropout),
            nn.Linear(4096, num_classes),
        )
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.constant_(m.bias, 0)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.avgpool(self.features(x)).flatten(1))


def vgg16_chain(model: VGG16) -> Chain:
    """`conv1_1` .. `conv5_3` (conv and its ReLU), `pool1` .. `pool5`, `fc6`, `fc7`, `fc8`."""
    layers: dict[str, nn.Module] = {}
    stage, conv = 1, 1
    children = list(model.features)
    i = 0
    while i < len(children):
        if isinstance(children[i], nn.MaxPool2d):
            layers[f"pool{stage}"] = children[i]
            stage, conv, i = stage + 1, 1, i + 1
        else:
            layers[f"conv{stage}_{conv}"] = nn.Sequential(children[i], children[i + 1])
            conv, i = conv + 1, i + 2
    c = model.classifier
    layers["fc6"] = nn.Sequential(model.avgpool, nn.Flatten(1), c[0], c[1], c[2])
    layers["fc7"] = nn.Sequential(c[3], c[4], c[5])
    layers["fc8"] = c[6]
    return Chain.from_modules(layers)
