"""CCNet's network in torch, name for name and key for key with the authors' models/ccnet.py.

Kept apart from `modalities.ccnet` so the registry can read the encoder's metadata without
importing torch. Also the authors' input preparation and strict checkpoint reading.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .errors import ModelUnavailableError

FLATTEN_DIM = 13152  # 3 blocks x (16x15x15 first order + 16x7x7 second order) for a 128x128 ROI
COMPETITION_WEIGHT = 0.8  # train.py --com_weight: channel competition 0.8, each spatial one 0.1
HEAD_KEY = "arclayer_.weight"


class GaborConv2d(nn.Module):
    """Learnable Gabor convolution (LGC): `channel_out` orientations, learnt sigma, gamma and f."""

    def __init__(self, channel_in: int, channel_out: int, kernel_size: int, stride: int = 1,
                 padding: int = 0, init_ratio: float = 1.0) -> None:
        super().__init__()
        self.channel_in = channel_in
        self.channel_out = channel_out
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.gamma = nn.Parameter(torch.tensor([2.0]))
        self.sigma = nn.Parameter(torch.tensor([9.2 * init_ratio]))
        self.theta = nn.Parameter(torch.arange(0, channel_out).float() * math.pi / channel_out,
                                  requires_grad=False)
        self.f = nn.Parameter(torch.tensor([0.057 / init_ratio]))
        self.psi = nn.Parameter(torch.tensor([0.0]), requires_grad=False)

    def genGaborBank(self) -> torch.Tensor:  # noqa: N802 - the official name
        """The [channel_out, channel_in, k, k] zero-mean Gabor kernels of the current parameters.

        Computed once per orientation and expanded over the input channels: the official code
        builds every (out, in) copy with repeat(), the same values at channel_in times the work.
        """
        half = self.kernel_size // 2
        coords = torch.arange(-half, half + 1, device=self.sigma.device).float()
        x = coords.view(1, 1, -1, 1)  # x runs down the rows, y along the columns, as in the official code
        y = coords.view(1, 1, 1, -1)
        theta = self.theta.view(-1, 1, 1, 1)
        x_theta = x * torch.cos(theta) + y * torch.sin(theta)
        y_theta = -x * torch.sin(theta) + y * torch.cos(theta)
        sigma = self.sigma.view(-1, 1, 1, 1)
        envelope = torch.exp(-0.5 * ((self.gamma * x_theta) ** 2 + y_theta ** 2) / (8 * sigma ** 2))
        bank = -envelope * torch.cos(2 * math.pi * self.f.view(-1, 1, 1, 1) * x_theta + self.psi.view(-1, 1, 1, 1))
        bank = bank - bank.mean(dim=[2, 3], keepdim=True)
        return bank.expand(-1, self.channel_in, -1, -1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.genGaborBank(), stride=self.stride, padding=self.padding)


class SELayer(nn.Module):
    """Squeeze-and-excitation channel reweighting (reduction 1, as the authors use it)."""

    def __init__(self, channel: int, reduction: int = 1) -> None:
        super().__init__()
        self.avg_pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Sequential(
            nn.Linear(channel, channel // reduction, bias=False),
            nn.ReLU(inplace=True),
            nn.Linear(channel // reduction, channel, bias=False),
            nn.Sigmoid(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, _, _ = x.size()
        y = self.fc(self.avg_pool(x).view(b, c)).view(b, c, 1, 1)
        return x * y.expand_as(x)


class CompetitiveBlock_Mul_Ord_Comp(nn.Module):  # noqa: N801 - the official name
    """Competitive block: 1st-order Gabor response and a 2nd-order Gabor of it, each through
    channel + spatial competition, SE, a 5x5/2 conv and a 2x2 max-pool; both flattened.

    The official signature also takes stride, padding and o2, which its code never reads (the
    Gabor convs always use stride 2 and padding ksize // 2); they are left out here.
    """

    def __init__(self, channel_in: int, n_competitor: int, ksize: int, weight: float,
                 init_ratio: float = 1.0, o1: int = 32) -> None:
        super().__init__()
        self.gabor_conv2d = GaborConv2d(channel_in=channel_in, channel_out=n_competitor, kernel_size=ksize,
                                        stride=2, padding=ksize // 2, init_ratio=init_ratio)
        self.gabor_conv2d2 = GaborConv2d(channel_in=n_competitor, channel_out=n_competitor, kernel_size=ksize,
                                         stride=2, padding=ksize // 2, init_ratio=init_ratio)
        self.conv1_1 = nn.Conv2d(n_competitor, o1 // 2, 5, 2, 0)
        self.conv2_1 = nn.Conv2d(n_competitor, o1 // 2, 5, 2, 0)
        self.maxpool = nn.MaxPool2d(2, 2)
        self.se1 = SELayer(n_competitor)
        self.se2 = SELayer(n_competitor)
        self.weight_chan = weight
        self.weight_spa = (1 - weight) / 2

    def compete(self, x: torch.Tensor) -> torch.Tensor:
        """Channel competition (softmax over orientations) blended with spatial competition
        (softmax over rows, and over columns)."""
        spatial = F.softmax(x, dim=2) + F.softmax(x, dim=3)
        return self.weight_chan * F.softmax(x, dim=1) + self.weight_spa * spatial

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.gabor_conv2d(x)
        first = self.maxpool(self.conv1_1(self.se1(self.compete(x))))
        x = self.gabor_conv2d2(x)  # 2nd order: Gabor of the raw 1st-order response, not of the competed one
        second = self.maxpool(self.conv2_1(self.se2(self.compete(x))))
        return torch.cat((first.view(first.shape[0], -1), second.view(second.shape[0], -1)), dim=1)


class ArcMarginProduct(nn.Module):
    """ArcFace head, cos(theta + m) scaled by s; the margin applies only in training."""

    def __init__(self, in_features: int, out_features: int, s: float = 30.0, m: float = 0.50,
                 easy_margin: bool = False) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.s = s
        self.m = m
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        nn.init.xavier_uniform_(self.weight)
        self.easy_margin = easy_margin
        self.cos_m = math.cos(m)
        self.sin_m = math.sin(m)
        self.th = math.cos(math.pi - m)
        self.mm = math.sin(math.pi - m) * m

    def forward(self, input: torch.Tensor, label: torch.Tensor | None = None) -> torch.Tensor:  # noqa: A002
        cosine = F.linear(F.normalize(input), F.normalize(self.weight))
        if not self.training:
            return self.s * cosine
        if label is None:
            raise ValueError("ArcMarginProduct needs labels in training mode")
        sine = torch.sqrt((1.0 - torch.pow(cosine, 2)).clamp(0, 1))
        phi = cosine * self.cos_m - sine * self.sin_m
        if self.easy_margin:
            phi = torch.where(cosine > 0, phi, cosine)
        else:
            phi = torch.where(cosine > self.th, phi, cosine - self.mm)
        one_hot = torch.zeros(cosine.size(), device=cosine.device)
        one_hot.scatter_(1, label.view(-1, 1).long(), 1)
        return ((one_hot * phi) + ((1.0 - one_hot) * cosine)) * self.s


class ccnet(nn.Module):  # noqa: N801 - the official name
    """CCNet = CB1 // CB2 // CB3 + fc + fc1 + dropout + ArcFace head (training only); `dim` is fc1's width,
    the matching feature's (modalities.ccnet.EMBEDDING_DIM, 2048 in the authors' checkpoints)."""

    def __init__(self, num_classes: int, dim: int, weight: float = COMPETITION_WEIGHT) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.cb1 = CompetitiveBlock_Mul_Ord_Comp(channel_in=1, n_competitor=9, ksize=35, init_ratio=1, weight=weight)
        self.cb2 = CompetitiveBlock_Mul_Ord_Comp(channel_in=1, n_competitor=36, ksize=17, init_ratio=0.5, weight=weight)
        self.cb3 = CompetitiveBlock_Mul_Ord_Comp(channel_in=1, n_competitor=9, ksize=7, init_ratio=0.25, weight=weight)
        self.fc = nn.Linear(FLATTEN_DIM, 4096)
        self.fc1 = nn.Linear(4096, dim)
        self.drop = nn.Dropout(p=0.5)
        self.arclayer_ = ArcMarginProduct(dim, num_classes, s=30, m=0.5, easy_margin=False)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The three blocks' outputs concatenated: [batch, 13152] for a 128x128 input."""
        return torch.cat((self.cb1(x), self.cb2(x), self.cb3(x)), dim=1)

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Training view: (ArcFace logits, L2-normalised fc ++ fc1 features for the contrastive loss)."""
        x1 = self.fc(self.features(x))
        x = self.fc1(x1)
        fe = torch.cat((x1, x), dim=1)
        return self.arclayer_(self.drop(x), y), F.normalize(fe, dim=-1)

    def getFeatureCode(self, x: torch.Tensor) -> torch.Tensor:  # noqa: N802 - the official name
        """The matching feature: fc1's 2048-d output, L2-normalised, as the authors' test() uses."""
        x = self.fc1(self.fc(self.features(x)))
        return x / torch.norm(x, p=2, dim=1, keepdim=True)

def roi_tensor(roi: np.ndarray) -> torch.Tensor:
    """A 1x1xHxW input as the authors' test loader makes it: ToTensor's [0, 1], then NormSingleROI."""
    tensor = torch.tensor(roi, dtype=torch.uint8).float().div(255).view(1, -1)
    mask = tensor > 0
    values = tensor[mask]
    tensor[mask] = (values - values.mean()) / (values.std() + 1e-6)
    return tensor.view(1, 1, *roi.shape)


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a CCNet checkpoint: raw, {"state_dict": ...}-wrapped, or DataParallel "module."-prefixed."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle, zip and weights_only refusals all land here
        raise ModelUnavailableError(f"cannot read {path} as a torch checkpoint of tensors: {exc}") from exc
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ModelUnavailableError(f"{path} is not a state dict of tensors (a raw or {{'state_dict': ...}} one)")
    if state and all(key.startswith("module.") for key in state):
        state = {key.removeprefix("module."): value for key, value in state.items()}
    return state


def check_keys(model: nn.Module, state: dict[str, torch.Tensor], path: Path) -> None:
    """ModelUnavailableError naming missing, unexpected and mis-shaped keys (first few of each)."""
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    shapes = [f"{k} {tuple(state[k].shape)} != {tuple(v.shape)}" for k, v in expected.items()
              if k in state and state[k].shape != v.shape]
    problems = [f"{label} ({len(keys)}): {', '.join(keys[:5])}{', ...' if len(keys) > 5 else ''}"
                for label, keys in (("missing keys", missing), ("unexpected keys", unexpected),
                                    ("shape mismatches (checkpoint != model)", shapes)) if keys]
    if problems:
        raise ModelUnavailableError(f"{path} is not a CCNet checkpoint of the official architecture: "
                                    + "; ".join(problems))
