"""Named real models at their published configurations, for `planopt profile-model`.

Each entry builds its chain, loss and a batch under a `FakeTensorMode`: no
weights are downloaded or even allocated, so a model of any size traces in
seconds (`planopt.runtime.fake.trace_profile`).

* `torchvision:resnet50`, `torchvision:vgg16`: torchvision's architectures
  (`planopt.runtime.vision`), 224x224 images, 1000 classes.
* `hf:gpt2`, `hf:gpt2-medium`: GPT-2 124M and 355M (`transformers`,
  `GPT2LMHeadModel`, the released configurations: vocabulary 50257, 1024
  positions, dropout 0.1, tied head).
* `hf:llama-1b`: the Llama 3.2 1B configuration (`LlamaForCausalLM`: 16
  layers, d 2048, 32 heads, 8 key-value heads, MLP 8192, vocabulary 128256,
  tied head).
* `hf:bert-base`: BERT-base (`BertForMaskedLM`, vocabulary 30522), masked-LM
  loss over every position.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from planopt.errors import PlanoptError
from planopt.runtime.chain import Chain, LossFn
from planopt.runtime.models import classification_loss, lm_loss


@dataclass(frozen=True)
class CatalogueModel:
    """One named model: how to build it, and its usual batch and sequence length."""

    name: str
    description: str
    batch: int
    seq: int | None  # tokens per sample (None: images)
    build: Callable[[int | None], Chain]  # seq -> chain
    loss_fn: LossFn
    needs: str = "torch"
    # The published configuration's positions (GPT-2's n_positions, the others'
    # max_position_embeddings): the longest sequence the model is, so a longer
    # one is refused rather than built on a grown configuration. None: images.
    positions: int | None = None


@dataclass(frozen=True)
class Built:
    """A catalogue model built fake: the chain, its loss and a fake batch."""

    chain: Chain
    loss_fn: LossFn
    batch: tuple[torch.Tensor, torch.Tensor]
    mode: FakeTensorMode


def _resnet50(_seq: int | None) -> Chain:
    from planopt.runtime.vision import ResNet50, resnet50_chain

    return resnet50_chain(ResNet50())


def _vgg16(_seq: int | None) -> Chain:
    from planopt.runtime.vision import VGG16, vgg16_chain

    return vgg16_chain(VGG16())


GPT2_POSITIONS = 1024  # n_positions of GPT-2 (124M) and GPT-2 medium (355M)
BERT_POSITIONS = 512  # max_position_embeddings of BERT-base
LLAMA_32_POSITIONS = 131072  # max_position_embeddings of Llama 3.2 1B


def _gpt2(d: int, heads: int, layers: int) -> Callable[[int | None], Chain]:
    def build(seq: int | None) -> Chain:
        from planopt.runtime.hf import gpt2_chain

        return gpt2_chain(50257, d, heads, layers, seq, positions=GPT2_POSITIONS)

    return build


def _llama1b(seq: int | None) -> Chain:
    from planopt.runtime.hf import llama_chain

    return llama_chain(
        128256, 2048, 32, 8, 16, seq, intermediate=8192, tie=True, positions=LLAMA_32_POSITIONS
    )


def _bert_base(seq: int | None) -> Chain:
    from planopt.runtime.hf import bert_chain

    return bert_chain(30522, 768, 12, 12, seq, positions=BERT_POSITIONS)


def _mlm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


MODELS: dict[str, CatalogueModel] = {
    m.name: m
    for m in (
        CatalogueModel(
            "torchvision:resnet50",
            "ResNet-50 (torchvision), 224x224",
            128,
            None,
            _resnet50,
            classification_loss,
        ),
        CatalogueModel(
            "torchvision:vgg16",
            "VGG-16 configuration D (torchvision), 224x224",
            64,
            None,
            _vgg16,
            classification_loss,
        ),
        CatalogueModel(
            "hf:gpt2",
            "GPT-2 124M (transformers)",
            8,
            1024,
            _gpt2(768, 12, 12),
            lm_loss,
            "hf",
            GPT2_POSITIONS,
        ),
        CatalogueModel(
            "hf:gpt2-medium",
            "GPT-2 355M (transformers)",
            8,
            1024,
            _gpt2(1024, 16, 24),
            lm_loss,
            "hf",
            GPT2_POSITIONS,
        ),
        CatalogueModel(
            "hf:llama-1b",
            "Llama 3.2 1B configuration (transformers)",
            4,
            2048,
            _llama1b,
            lm_loss,
            "hf",
            LLAMA_32_POSITIONS,
        ),
        CatalogueModel(
            "hf:bert-base",
            "BERT-base masked LM (transformers)",
            32,
            512,
            _bert_base,
            _mlm_loss,
            "hf",
            BERT_POSITIONS,
        ),
    )
}


class UnknownModelError(PlanoptError, ValueError):
    """A model name that is not in the catalogue."""


class SequenceLengthError(PlanoptError, ValueError):
    """A sequence longer than the model's configuration has positions for."""


def catalogue_model(name: str) -> CatalogueModel:
    if name not in MODELS:
        raise UnknownModelError(f"model must be one of {', '.join(MODELS)}, got {name!r}")
    model = MODELS[name]
    if model.needs == "hf":
        from planopt.runtime.hf import hf_available

        if not hf_available():
            raise UnknownModelError(
                f"model {name} needs the transformers package (pip install 'planopt[models]')"
            )
    return model


def build_fake(name: str, batch: int | None = None, seq: int | None = None) -> Built:
    """`name` built under a new `FakeTensorMode`, with a fake batch of `batch` samples."""
    model = catalogue_model(name)
    b = model.batch if batch is None else batch
    s = model.seq if seq is None or model.seq is None else seq
    if s is not None and model.positions is not None and s > model.positions:
        raise SequenceLengthError(
            f"seq must be at most {model.positions} for {name} (the positions of its "
            f"published configuration; a longer sequence would need another model), got {s}"
        )
    mode = FakeTensorMode()
    with mode, torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        chain = model.build(s)
        if s is None:
            x = torch.zeros(b, 3, 224, 224)
            y = torch.zeros(b, dtype=torch.long)
        else:
            x = torch.zeros(b, s, dtype=torch.long)
            y = torch.zeros(b, s, dtype=torch.long)
    return Built(chain, model.loss_fn, (x, y), mode)
