"""Known wrong answers of notebook 00: the judge names them, the tests use them as mutants.

Instructor-side only (next to the reference, not released). Each is complete and
self-contained, with exactly one thing wrong.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from autograder.checks.warmup import AUTOGRAD_STEP, BY_HAND
from autograder.core import Mistake

# ------------------------------------------------------------------------------ neuron


def neuron_without_sigmoid(x, w, b):
    return x @ w + b


def neuron_without_bias(x, w, b):
    return torch.sigmoid(x @ w)


def neuron_flipped_sign(x, w, b):
    return 1 / (1 + torch.exp(x @ w + b))


# ---------------------------------------------------------------------------- mse_loss


def mse_sum(prediction, target):
    return (prediction - target).pow(2).sum()


def mse_not_squared(prediction, target):
    return (prediction - target).mean()


def mse_absolute(prediction, target):
    return (prediction - target).abs().mean()


def mse_root(prediction, target):
    return (prediction - target).pow(2).mean().sqrt()


# ----------------------------------------------------------------------- gradient_step


def _step(x, y, w, b, lr, *, slope=True, two=2.0, per_sample=True, sign=1.0, bias_sum=True, move_b=True):
    p = torch.sigmoid(x @ w + b)
    delta = two * (p - y) / (len(y) if per_sample else 1)
    if slope:
        delta = delta * p * (1 - p)
    grad_w = x.T @ delta
    grad_b = delta.sum() if bias_sum else delta.mean()
    new_b = b - sign * lr * grad_b if move_b else b
    return w - sign * lr * grad_w, new_b


def step_without_sigmoid_slope(x, y, w, b, lr):
    return _step(x, y, w, b, lr, slope=False)


def step_uphill(x, y, w, b, lr):
    return _step(x, y, w, b, lr, sign=-1.0)


def step_without_one_over_n(x, y, w, b, lr):
    return _step(x, y, w, b, lr, per_sample=False)


def step_without_two(x, y, w, b, lr):
    return _step(x, y, w, b, lr, two=1.0)


def step_bias_fixed(x, y, w, b, lr):
    return _step(x, y, w, b, lr, move_b=False)


def step_bias_mean(x, y, w, b, lr):
    return _step(x, y, w, b, lr, bias_sum=False)


def step_with_autograd(x, y, w, b, lr):
    """Switches autograd back on inside the check's torch.no_grad()."""
    w, b = w.clone().requires_grad_(), b.clone().requires_grad_()
    with torch.enable_grad():
        grad_w, grad_b = torch.autograd.grad((torch.sigmoid(x @ w + b) - y).pow(2).mean(), (w, b))
    return (w - lr * grad_w).detach(), (b - lr * grad_b).detach()


# ------------------------------------------------------------------------- activations


def sigmoid(z):
    return 1 / (1 + torch.exp(-z))


def sigmoid_derivative(z):
    s = sigmoid(z)
    return s * (1 - s)


def sigmoid_derivative_as_sigmoid(z):
    return sigmoid(z)


def sigmoid_from_exp_z(z):
    return torch.exp(z) / (1 + torch.exp(z))


def sigmoid_derivative_from_exp_z(z):
    s = sigmoid_from_exp_z(z)
    return s * (1 - s)


def sigmoid_derivative_from_exp_minus_z(z):
    return torch.exp(-z) / (1 + torch.exp(-z)) ** 2


def sigmoid_flipped(z):
    return 1 / (1 + torch.exp(z))


def sigmoid_flipped_derivative(z):
    s = sigmoid_flipped(z)
    return -s * (1 - s)


def relu(z):
    return torch.clamp(z, min=0)


def relu_derivative_one_at_zero(z):
    return (z >= 0).to(z.dtype)


def relu_derivative_bool(z):
    return z > 0


def relu_derivative_float32(z):
    return (z > 0).float()


def silu(z):
    return z * sigmoid(z)


def silu_derivative_as_sigmoid(z):
    return sigmoid(z)


def silu_derivative_without_one_minus_s(z):
    return sigmoid(z) * (1 + z)


def silu_derivative_from_exp(z):
    e = torch.exp(-z)
    return (1 + e + z * e) / (1 + e) ** 2


def silu_derivative(z):
    s = sigmoid(z)
    return s * (1 + z * (1 - s))


def silu_from_exp_z(z):
    return z * torch.exp(z) / (1 + torch.exp(z))


# ----------------------------------------------------------------------------- spirals

ACTIVATIONS = {"relu": nn.ReLU, "silu": nn.SiLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}


class MLP(nn.Module):
    def __init__(self, width, depth, activation="relu"):
        super().__init__()
        layers, size = [], 2
        for _ in range(depth):
            layers += [nn.Linear(size, width), ACTIVATIONS[activation]()]
            size = width
        self.layers = nn.Sequential(*layers, nn.Linear(size, 2))

    def forward(self, x):
        return self.layers(x)


class LinearMLP(nn.Module):
    def __init__(self, width, depth, activation="relu"):
        super().__init__()
        layers, size = [], 2
        for _ in range(depth):
            layers.append(nn.Linear(size, width))
            size = width
        self.layers = nn.Sequential(*layers, nn.Linear(size, 2))

    def forward(self, x):
        return self.layers(x)


class OneHiddenLayerMLP(MLP):
    def __init__(self, width, depth, activation="relu"):
        super().__init__(width, min(depth, 1), activation)


def train_full_batch(model, x, y, steps, lr, *, step=True):
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        if step:
            optimizer.step()
        losses.append(loss.item())
    return losses


def train_without_step(model, x, y, steps, lr):
    return train_full_batch(model, x, y, steps, lr, step=False)


MISTAKES = {
    "00.neuron": [
        Mistake("no sigmoid: the pre-activation x @ w + b is returned",
                "apply the sigmoid to z = x @ w + b; a neuron's output is a probability in [0, 1].",
                neuron_without_sigmoid),
        Mistake("the bias is left out", "add b to x @ w before the sigmoid.", neuron_without_bias),
        Mistake("the sign in the exponent is flipped, 1 / (1 + e^z)",
                "sigmoid(z) = 1 / (1 + e^(-z)): large z should give outputs near 1.", neuron_flipped_sign),
    ],
    "00.mse_loss": [
        Mistake("the sum of the squared errors instead of their mean",
                "divide by N, i.e. use .mean(): the loss should not grow with the number of samples.", mse_sum),
        Mistake("the errors are not squared", "square each error before averaging: positive and negative "
                "errors must not cancel.", mse_not_squared),
        Mistake("the mean absolute error", "square the errors instead of taking their absolute value.",
                mse_absolute),
        Mistake("the root of the mean squared error (RMSE)", "return the mean of the squares, without the "
                "square root.", mse_root),
    ],
    "00.gradient_step": [
        Mistake("the sigmoid's slope p (1 - p) is missing from the chain rule",
                "multiply dL/dp by dp/dz = p (1 - p) before multiplying by x.", step_without_sigmoid_slope),
        Mistake("gradient ascent: the step goes uphill", "subtract lr * gradient from w and b.", step_uphill),
        Mistake("the gradient of the sum, not the mean (1/N missing)",
                "the loss is a mean: dL/dp_n = 2 (p_n - y_n) / N.", step_without_one_over_n),
        Mistake("the factor 2 from the derivative of the square is missing",
                "d/dp (p - y)^2 = 2 (p - y).", step_without_two),
        Mistake("the bias is not updated", "b moves too: b - lr * dL/db, with dL/db = sum of delta.",
                step_bias_fixed),
        Mistake("dL/db is the mean of delta instead of its sum",
                "delta already holds the 1/N; dz_n/db = 1, so dL/db = delta.sum().", step_bias_mean),
        # Its run ends in the refused call, which the check's error hint explains in these words.
        Mistake(AUTOGRAD_STEP, BY_HAND, step_with_autograd),
    ],
    "00.sigmoid": [
        Mistake("sigmoid'(z) = sigmoid(z): the factor (1 - sigmoid(z)) is missing",
                "sigmoid'(z) = sigmoid(z) * (1 - sigmoid(z)).", (sigmoid, sigmoid_derivative_as_sigmoid)),
        Mistake("sigmoid written as e^z / (1 + e^z), which is inf / inf = NaN for large z",
                "write 1 / (1 + e^-z): for very negative z it becomes 1 / inf = 0, the right limit.",
                (sigmoid_from_exp_z, sigmoid_derivative_from_exp_z)),
        Mistake("sigmoid' written as e^-z / (1 + e^-z)^2, which is inf / inf = NaN for very negative z",
                "write the derivative with your sigmoid: s * (1 - s) never overflows.",
                (sigmoid, sigmoid_derivative_from_exp_minus_z)),
        Mistake("the sign in the exponent is flipped, 1 / (1 + e^z)", "sigmoid(z) = 1 / (1 + e^(-z)).",
                (sigmoid_flipped, sigmoid_flipped_derivative)),
    ],
    "00.relu": [
        Mistake("relu'(0) = 1 (z >= 0 instead of z > 0)",
                "this course, like PyTorch, takes relu'(0) = 0: use z > 0.",
                (relu, relu_derivative_one_at_zero)),
        Mistake("the derivative is a bool tensor", "convert the comparison with .to(z.dtype).",
                (relu, relu_derivative_bool)),
        Mistake("the derivative is float32 whatever the dtype of z (.float())",
                "use .to(z.dtype) so that float64 in gives float64 out.", (relu, relu_derivative_float32)),
    ],
    "00.silu": [
        Mistake("silu'(z) = sigmoid(z): the product rule's second term z * sigmoid'(z) is missing",
                "d/dz [z * s(z)] = s(z) + z * s(z) * (1 - s(z)).", (silu, silu_derivative_as_sigmoid)),
        Mistake("silu'(z) = sigmoid(z) * (1 + z): the factor (1 - sigmoid(z)) of sigmoid' is missing",
                "the second term is z * sigmoid'(z) = z * s * (1 - s).",
                (silu, silu_derivative_without_one_minus_s)),
        Mistake("silu' written with e^-z in numerator and denominator, NaN for very negative z",
                "write it with your sigmoid: s * (1 + z * (1 - s)) stays finite.", (silu, silu_derivative_from_exp)),
        Mistake("silu written as z e^z / (1 + e^z), which is NaN for large z",
                "write z * sigmoid(z), with the sigmoid written as 1 / (1 + e^-z).",
                (silu_from_exp_z, silu_derivative)),
    ],
    "00.spirals": [
        Mistake("no activation between the layers: the MLP is one linear map",
                "put the activation after every hidden nn.Linear (not after the last one).", (LinearMLP, train_full_batch)),
        Mistake("the depth is ignored: always one hidden layer",
                "build `depth` hidden layers of `width` units in a loop.", (OneHiddenLayerMLP, train_full_batch)),
        # Not catalogued: a loop without optimizer.zero_grad(). Its accumulated gradients make
        # training chaotic, so a student's run never equals the judge's bit for bit and the
        # mistake could not be named; the loss property's message asks about zero_grad instead.
        Mistake("optimizer.step() is never called: the weights never change",
                "call optimizer.step() after loss.backward().", (MLP, train_without_step)),
    ],
}
