"""Correct answers to notebook 00 written differently from the reference."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from grader.casework import Answer

# ------------------------------------------------------------------------------ neuron


def neuron_einsum(x, w, b):
    """torch.special.expit on an einsum."""
    return torch.special.expit(torch.einsum("nf,f->n", x, w) + b)


def neuron_broadcast(x, w, b):
    """Elementwise product summed over features; the sigmoid written out."""
    return 1 / (1 + torch.exp(-((x * w).sum(dim=1) + b)))


# ---------------------------------------------------------------------------- mse_loss


def mse_square(prediction, target):
    """torch.square and a sum divided by N."""
    return torch.square(prediction - target).sum() / target.numel()


def mse_dot(prediction, target):
    error = prediction - target
    return error @ error / error.numel()


# ----------------------------------------------------------------------- gradient_step


def step_einsum(x, y, w, b, lr):
    """The chain rule with einsum and the sigmoid slope as sigmoid(z) * sigmoid(-z)."""
    z = x @ w + b
    p = torch.sigmoid(z)
    delta = 2.0 / x.shape[0] * (p - y) * torch.sigmoid(z) * torch.sigmoid(-z)
    return w - lr * torch.einsum("nf,n->f", x, delta), b - lr * delta.sum()


def step_per_sample(x, y, w, b, lr):
    """Gradients accumulated sample by sample, then averaged."""
    grad_w, grad_b = torch.zeros_like(w), torch.zeros_like(b)
    for x_n, y_n in zip(x, y, strict=True):
        p = torch.sigmoid(x_n @ w + b)
        d = 2 * (p - y_n) * p * (1 - p)
        grad_w, grad_b = grad_w + d * x_n, grad_b + d
    n = len(y)
    return w - lr * grad_w / n, b - lr * grad_b / n


# ------------------------------------------------------------------------- activations


def sigmoid_where(z):
    """Two branches, each with an exponent that cannot overflow."""
    e = torch.exp(-z.abs())
    return torch.where(z >= 0, 1 / (1 + e), e / (1 + e))


def sigmoid_where_derivative(z):
    return sigmoid_where(z) * sigmoid_where(-z)


def sigmoid_tanh(z):
    return 0.5 * (1 + torch.tanh(z / 2))


def sigmoid_tanh_derivative(z):
    return 0.25 * (1 - torch.tanh(z / 2) ** 2)


def relu_where(z):
    return torch.where(z > 0, z, torch.zeros_like(z))


def relu_heaviside_derivative(z):
    return torch.heaviside(z, torch.zeros_like(z))


def relu_mask(z):
    return z * (z > 0)


def relu_sign_derivative(z):
    return torch.sign(z).clamp(min=0)


def silu_expit(z):
    return z * torch.special.expit(z)


def silu_expit_derivative(z):
    s = torch.special.expit(z)
    return s + z * s * torch.special.expit(-z)


def silu_divided(z):
    """z / (1 + e^-z): at z = -1000, -1000 / inf = -0, the right limit."""
    return z / (1 + torch.exp(-z))


def silu_tanh_derivative(z):
    s = sigmoid_tanh(z)
    return s + z * sigmoid_tanh_derivative(z)


# ----------------------------------------------------------------------------- spirals


class MLPModuleList(nn.Module):
    """Layers in a ModuleList, the activation applied functionally."""

    def __init__(self, width, depth, activation="relu"):
        super().__init__()
        sizes = [2] + [width] * depth
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True))
        self.out = nn.Linear(sizes[-1], 2)
        functions = {"relu": F.relu, "silu": F.silu, "sigmoid": torch.sigmoid, "tanh": torch.tanh}
        self.activation = functions[activation]

    def forward(self, x):
        for layer in self.hidden:
            x = self.activation(layer(x))
        return self.out(x)


def train_nll(model, x, y, steps, lr):
    """log_softmax + nll_loss, gradients set to None before each backward."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = F.nll_loss(F.log_softmax(model(x), dim=1), y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


class MLPSequential(nn.Sequential):
    """An nn.Sequential subclass built in __init__."""

    def __init__(self, width, depth, activation="relu"):
        make = {"relu": nn.ReLU, "silu": nn.SiLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}[activation]
        layers = []
        for i in range(depth):
            layers += [nn.Linear(2 if i == 0 else width, width), make()]
        super().__init__(*layers, nn.Linear(width if depth else 2, 2))


def train_criterion(model, x, y, steps, lr):
    """nn.CrossEntropyLoss, model.zero_grad()."""
    optimizer, criterion = torch.optim.Adam(model.parameters(), lr=lr), nn.CrossEntropyLoss()
    losses = []
    for _ in range(steps):
        model.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


class MLPAttributes(nn.Module):
    """One attribute per layer, registered from the output layer back to the first: the hidden
    biases come before the first layer's, all of one shape."""

    def __init__(self, width, depth, activation="relu"):
        super().__init__()
        self.logits = nn.Linear(width if depth else 2, 2)
        self.depth = depth
        self.activation = {"relu": torch.relu, "silu": F.silu, "sigmoid": torch.sigmoid, "tanh": torch.tanh}[
            activation
        ]
        for i in reversed(range(depth)):
            setattr(self, f"hidden{i}", nn.Linear(2 if i == 0 else width, width))

    def forward(self, x):
        for i in range(self.depth):
            x = self.activation(getattr(self, f"hidden{i}")(x))
        return self.logits(x)


def train_loss_after_step(model, x, y, steps, lr):
    """Records the loss after each step: a second forward pass once the weights have moved."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        with torch.no_grad():
            losses.append(F.cross_entropy(model(x), y).item())
    return losses


ALTERNATIVES = {
    "00.neuron": [neuron_einsum, neuron_broadcast],
    "00.mse_loss": [mse_square, mse_dot],
    "00.gradient_step": [step_einsum, step_per_sample],
    "00.sigmoid": [
        Answer("sigmoid_where", sigmoid_where, sigmoid_where_derivative),
        Answer("sigmoid_tanh", sigmoid_tanh, sigmoid_tanh_derivative),
    ],
    "00.relu": [
        Answer("relu_where", relu_where, relu_heaviside_derivative),
        Answer("relu_mask", relu_mask, relu_sign_derivative),
    ],
    "00.silu": [
        Answer("silu_expit", silu_expit, silu_expit_derivative),
        Answer("silu_divided", silu_divided, silu_tanh_derivative),
    ],
    "00.spirals": [
        Answer("module_list_nll", MLPModuleList, train_nll),
        Answer("sequential_criterion", MLPSequential, train_criterion),
        Answer("attributes_loss_after_step", MLPAttributes, train_loss_after_step),
    ],
}
