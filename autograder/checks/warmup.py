"""Checks of notebook 00, the warm-up: a neuron, its loss and gradient, activations, an MLP.

Key: N samples, F features. The activation checks include |z| of 100 and 1000 in float32,
where formulas with e^z or e^-z in both numerator and denominator give inf / inf = NaN. The
spirals check is judged by a criterion (held-out accuracy within a step budget), not by
equality with the reference: two correct trainings differ in their floating-point details.
The judge computes that accuracy itself, with the MLP that the trained parameters describe,
and checks train's losses against the losses of the initial and the final parameters: a
forward that is not that MLP, or a loop that takes no step, cannot pass.
"""

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from ..core import Case, Check, ErrorHint, Outputs, Property, library_calls
from ..playground import one_thread, spirals_split

# Autograd computes the derivatives that the gradient step and the activations ask for by hand
# (torch.func and torch.autograd.functional call torch.autograd.grad).
AUTOGRAD = library_calls("torch.autograd.grad", "torch.autograd.backward", "torch.Tensor.backward")

# ------------------------------------------------------------------------------ neuron

NEURON_SHAPES = [(5, 3, 1.0), (1, 1, 1.0), (4, 6, 20.0), (8, 2, 0.1)]  # N, F, scale of w (20: saturated)


def neuron_data(g: torch.Generator, n: int, f: int, scale: float) -> dict:
    return {
        "x": torch.randn(n, f, generator=g),
        "w": torch.randn(f, generator=g) * scale,
        "b": torch.randn((), generator=g),
    }


def _random_shapes(g: torch.Generator, hidden: bool) -> list[tuple[int, int, float]]:
    if not hidden:
        return []
    shapes = []
    for _ in range(3):
        n, f = (int(torch.randint(2, m, (), generator=g)) for m in (40, 12))
        shapes.append((n, f, float(10 ** torch.empty(()).uniform_(-1, 1, generator=g))))
    return shapes


def neuron_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    return [
        Case(f"x of shape ({n}, {f}), |w| ~ {s:g}", neuron_data(g, n, f, s))
        for n, f, s in NEURON_SHAPES + _random_shapes(g, hidden)
    ]


def run_neuron(neuron, case: Case) -> Outputs:
    i = case.inputs
    return {"p": neuron(i["x"], i["w"], i["b"])}


def _in_unit_interval(case: Case, out: Outputs) -> str | None:
    p = out["p"]
    if bool(((p >= 0) & (p <= 1)).all()):
        return None
    low, high = p.min().item(), p.max().item()
    return f"a sigmoid neuron outputs values in [0, 1]; yours range from {low:.3g} to {high:.3g}"


NEURON = Check(
    name="00.neuron",
    target="neuron",
    cases=neuron_cases,
    run=run_neuron,
    properties=[Property("outputs lie in [0, 1]", _in_unit_interval)],
    error_hints=[ErrorHint("size mismatch", "x is (N, F) and w is (F,): x @ w is (N,). Do not transpose x.")],
    hints=[
        "One neuron: a weighted sum of the F features of each sample, plus the bias, through a sigmoid.",
        "x @ w multiplies the (N, F) matrix by the (F,) vector and gives one number per sample, shape (N,).",
        "Add b (a 0-dim tensor broadcasts to every sample) before the sigmoid, not after it.",
    ],
)

# ---------------------------------------------------------------------------- mse_loss

MSE_SIZES = [6, 1, 9, 3]


def mse_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    sizes = MSE_SIZES + ([int(torch.randint(2, 200, (), generator=g)) for _ in range(3)] if hidden else [])
    cases = []
    for n in sizes:
        prediction = torch.rand(n, generator=g)
        target = (torch.rand(n, generator=g) > 0.5).float()
        inputs = {"prediction": prediction, "target": target}
        cases.append(Case(f"{n} predictions in [0, 1], 0/1 targets", inputs))
    return cases


def run_mse(mse_loss, case: Case) -> Outputs:
    target = case.inputs["target"]
    return {
        "loss": mse_loss(case.inputs["prediction"], target),
        "loss_perfect": mse_loss(target, target.clone()),
    }


def _perfect_is_zero(case: Case, out: Outputs) -> str | None:
    zero = out["loss_perfect"]
    worst = zero.abs().max().item()
    return None if worst == 0 else f"mse_loss(target, target) should be 0, got up to {worst:.3g}"


def _non_negative(case: Case, out: Outputs) -> str | None:
    loss = out["loss"]
    lowest = loss.min().item()
    return None if lowest >= 0 else f"a mean of squares cannot be negative; got {lowest:.3g}"


MSE = Check(
    name="00.mse_loss",
    target="mse_loss",
    cases=mse_cases,
    run=run_mse,
    forbidden=library_calls("torch.nn.functional.mse_loss", "torch._C._nn.mse_loss"),  # nn.MSELoss too
    properties=[
        Property("zero for a perfect prediction", _perfect_is_zero),
        Property("never negative", _non_negative),
    ],
    hints=[
        "Three steps: the error of each sample, its square, the average over the N samples.",
        "Return a 0-dim tensor (what .mean() gives), not a Python float and not an (N,) tensor.",
        "The mean, not the sum: the loss should not grow with the number of samples.",
    ],
)

# ----------------------------------------------------------------------- gradient_step

STEP_SHAPES = [(6, 3, 1.0, 0.5), (1, 2, 1.0, 0.1), (10, 4, 3.0, 1.0), (5, 1, 0.5, 2.0)]  # N, F, |w|, lr


def step_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    shapes = list(STEP_SHAPES)
    if hidden:
        for n, f, scale in _random_shapes(g, hidden):
            shapes.append((n, f, scale, float(10 ** torch.empty(()).uniform_(-2, 0.5, generator=g))))
    cases = []
    for n, f, scale, lr in shapes:
        data = neuron_data(g, n, f, scale)
        data["y"] = (torch.rand(n, generator=g) > 0.5).float()
        data["lr"] = lr
        cases.append(Case(f"x of shape ({n}, {f}), 0/1 targets y, |w| ~ {scale:g}, lr={lr:g}", data))
    return cases


def run_step(gradient_step, case: Case) -> Outputs:
    i = case.inputs
    with torch.no_grad():  # the gradient must be derived by hand: autograd is switched off
        new_w, new_b = gradient_step(i["x"], i["y"], i["w"], i["b"], i["lr"])
    return {"w": new_w, "b": new_b}


def _autograd_move(case: Case) -> torch.Tensor:
    """How much autograd's step moves (w, b), as one (F + 1,) float64 vector.

    The judge's own gradient, computed here and nowhere else: a function of (x, y, w, b, lr)
    returning the step would be an answer any student could import from this package.
    """
    i = case.inputs
    w, b = i["w"].clone().requires_grad_(), i["b"].clone().requires_grad_()
    with torch.enable_grad():
        loss = (torch.sigmoid(i["x"] @ w + b) - i["y"]).pow(2).mean()
        grad_w, grad_b = torch.autograd.grad(loss, (w, b))
    new_w, new_b = (w - i["lr"] * grad_w).detach(), (b - i["lr"] * grad_b).detach()
    return torch.cat([new_w - i["w"], (new_b - i["b"]).reshape(1)]).double()


def _matches_autograd(case: Case, out: Outputs) -> str | None:
    i = case.inputs
    got_w, got_b = out["w"], out["b"]
    if got_w.shape != i["w"].shape or got_b.shape != i["b"].shape:
        return None  # the shapes are reported first
    want = _autograd_move(case)
    got = torch.cat([got_w - i["w"], (got_b - i["b"]).reshape(1)]).double()  # your move
    if torch.allclose(got, want, rtol=1e-4, atol=1e-6):
        return None
    fmt = ", ".join
    lines = (
        f"autograd, from the same x, y, w, b, moves (w, b) by [{fmt(f'{v:.3g}' for v in want.tolist())}]; "
        f"your step moves them by [{fmt(f'{v:.3g}' for v in got.tolist())}]"
    )
    if torch.allclose(got, -want, rtol=1e-4, atol=1e-6):
        return lines + ". That is exactly the opposite direction: gradient descent subtracts lr * gradient."
    if torch.allclose(got[:-1], want[:-1], rtol=1e-4, atol=1e-6):
        return lines + ". w is right, b is not: dL/db is the sum over samples of the same factor as dL/dw."
    scale = (got @ want / (want @ want)).item() if want.abs().sum() > 0 else 0.0
    if abs(scale) > 1e-3 and torch.allclose(got, scale * want, rtol=1e-3, atol=1e-6):
        return lines + f". Your step is {scale:.3g} times autograd's: check the constant factors (2 and 1/N)."
    return lines + "."


BY_HAND = (
    "derive dL/dw and dL/db by hand with the chain rule (the formulas above) and compute them with tensor "
    "operations (the check runs your function under torch.no_grad())."
)

GRADIENT_STEP = Check(
    name="00.gradient_step",
    target="gradient_step",
    cases=step_cases,
    run=run_step,
    forbidden=AUTOGRAD,
    properties=[Property("the step equals autograd's step", _matches_autograd)],
    error_hints=[
        *(ErrorHint(f"calls {name}", f"autograd computed the gradient: {BY_HAND}") for _, name in AUTOGRAD),
        ErrorHint("NoneType", f"w.grad is None: nothing fills it here; {BY_HAND}"),
        ErrorHint(
            "size mismatch", "x is (N, F): dL/dw = x.T @ delta, where delta (N,) holds one number per sample."
        ),
    ],
    hints=[
        "Chain rule in three links: dL/dp (the loss w.r.t. each prediction), dp/dz (the sigmoid's slope), "
        "dz/dw = x and dz/db = 1.",
        "With p = sigmoid(z): dL/dp_n = 2 (p_n - y_n) / N and dp_n/dz_n = p_n (1 - p_n).",
        "Multiply the two into delta (N,); then dL/dw = x.T @ delta (F,) and dL/db = delta.sum().",
        "Descent goes downhill: new_w = w - lr * dL/dw, and the same for b. Return new tensors.",
    ],
)

# -------------------------------------------------------------------------- activations

SLOPE_STEP = 1e-5  # h of the central difference (f(z + h) - f(z - h)) / 2h, in float64


def _zero_first(z: torch.Tensor) -> torch.Tensor:
    z.view(-1)[0] = 0.0  # the kink of ReLU: its derivative there is 0 by convention
    return z


def activation_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    large = torch.tensor([-1000.0, -100.0, -88.0, -20.0, 0.0, 20.0, 88.0, 100.0, 1000.0])
    inputs = [
        ("25 values from -6 to 6 (0 included)", torch.linspace(-6, 6, 25)),
        ("large |z|: -1000, -100, -88, -20, 0, 20, 88, 100, 1000", large),
        ("a (3, 4) matrix (first entry 0)", _zero_first(torch.randn(3, 4, generator=g))),
    ]
    if hidden:
        for _ in range(3):
            shape = tuple(
                int(d) for d in torch.randint(1, 8, (int(torch.randint(1, 4, (), generator=g)),), generator=g)
            )
            scale = float(10 ** torch.empty(()).uniform_(-1, 2.5, generator=g))
            inputs.append(
                (
                    f"random z of shape {shape}, |z| ~ {scale:.3g} (first entry 0)",
                    _zero_first(torch.randn(shape, generator=g) * scale),
                )
            )
    cases = []
    for name, z in inputs:
        slope = torch.randn(16, generator=g, dtype=torch.float64) * 4
        slope = slope + slope.sign() * 0.01  # keep z +- h away from the kink at 0
        cases.append(Case(f"{name}, float32", {"z": z, "z_slope": slope, "h": SLOPE_STEP}))
    return cases


def run_activation(functions, case: Case) -> Outputs:
    f, derivative = functions
    z, zs, h = case.inputs["z"], case.inputs["z_slope"], case.inputs["h"]
    return {
        "f": f(z),
        "df": derivative(z),
        "f(z+h) float64": f(zs + h),
        "f(z-h) float64": f(zs - h),
        "df float64": derivative(zs),
    }


def _slope_agrees(case: Case, out: Outputs) -> str | None:
    zs, h = case.inputs["z_slope"], case.inputs["h"]
    numeric = (out["f(z+h) float64"].double() - out["f(z-h) float64"].double()) / (2 * h)
    yours = out["df float64"].double()
    if numeric.shape != yours.shape or not torch.isfinite(numeric).all():
        return None
    gap = (numeric - yours).abs()
    if bool((gap <= 1e-6 + 1e-6 * numeric.abs()).all()):
        return None
    k = int(gap.argmax())
    return (
        f"at z = {zs[k].item():.4g} the slope of your own function, (f(z+h) - f(z-h)) / 2h with h = {h:g}, "
        f"is {numeric[k].item():.6g}, but your derivative says {yours[k].item():.6g}"
    )


SLOPE = Property("the derivative agrees with the slope of your own function", _slope_agrees)
NOT_A_TENSOR = ErrorHint(
    "must be Tensor",
    "work with torch functions (torch.exp, torch.clamp, torch.where), "
    "not math.exp or numpy: they take a tensor and return one.",
)


def activation_check(
    name: str, functions: tuple[str, str], library: Sequence[tuple[Callable, str]], hints: list[str]
) -> Check:
    """The check of one activation and its derivative, which may call neither its library
    version (`library`, from library_calls) nor autograd."""
    return Check(
        name=f"00.{name}",
        target=functions,
        answer="activations",
        cases=activation_cases,
        run=run_activation,
        forbidden=(*library, *AUTOGRAD),
        properties=[SLOPE],
        error_hints=[NOT_A_TENSOR],
        hints=hints,
        hidden_points=1.0,  # three short formulas: together worth less than the spirals question
    )


SIGMOID = activation_check(
    "sigmoid",
    ("sigmoid", "sigmoid_derivative"),
    # F.sigmoid calls Tensor.sigmoid, nn.Sigmoid torch.sigmoid; exp(logsigmoid(z)) is the sigmoid too.
    library_calls(
        "torch.sigmoid",
        "torch.sigmoid_",
        "torch.Tensor.sigmoid",
        "torch.Tensor.sigmoid_",
        "torch.special.expit",
        "torch.nn.functional.logsigmoid",
    ),
    [
        "sigmoid(z) = 1 / (1 + e^-z). Write the derivative in terms of sigmoid(z) itself.",
        "sigmoid'(z) = sigmoid(z) * (1 - sigmoid(z)): differentiate (1 + e^-z)^-1 and simplify.",
        "At z = -100 in float32, e^-z overflows to inf and 1 / (1 + inf) = 0: the right limit. "
        "e^z / (1 + e^z) at z = 100 is inf / inf = NaN instead.",
    ],
)
RELU = activation_check(
    "relu",
    ("relu", "relu_derivative"),
    # F.relu_ calls torch.relu_, nn.ReLU F.relu.
    library_calls(
        "torch.relu", "torch.relu_", "torch.Tensor.relu", "torch.Tensor.relu_", "torch.nn.functional.relu"
    ),
    [
        "ReLU keeps positive values and sets the others to 0, elementwise on the whole tensor at once "
        "(Python's max works on single numbers only).",
        "Its derivative is 1 where z > 0 and 0 where z < 0; at z = 0 this course (like PyTorch) uses 0.",
        "torch.clamp(z, min=0) or torch.where(z > 0, z, 0) for relu. A comparison gives a bool tensor: "
        "convert it with .to(z.dtype) so the derivative has the input's dtype.",
    ],
)
SILU = activation_check(
    "silu",
    ("silu", "silu_derivative"),
    library_calls("torch.nn.functional.silu", "torch._C._nn.silu", "torch._C._nn.silu_"),  # nn.SiLU too
    [
        "SiLU is the input scaled by its own sigmoid: reuse your sigmoid rather than a new exponential.",
        "Product rule on z * sigmoid(z): silu'(z) = sigmoid(z) + z * sigmoid'(z).",
        "Written with sigmoid(z) only, silu'(z) = s + z s (1 - s) stays finite for every z; "
        "formulas with e^-z in numerator and denominator overflow to inf / inf = NaN for very negative z.",
    ],
)

# ----------------------------------------------------------------------------- spirals

SPIRALS = {"width": 48, "depth": 2, "activation": "relu", "steps": 200, "lr": 0.03}
THRESHOLD = 0.9  # held-out accuracy required


def spirals_cases(g: torch.Generator, hidden: bool) -> list[Case]:
    cases = []
    for _ in range(2 if hidden else 1):
        seed = int(torch.randint(0, 2**31 - 1, (), generator=g))
        x_train, y_train, x_test, y_test = spirals_split(g)
        name = (
            f"two spirals, {len(x_train)} training and {len(x_test)} held-out points; "
            f"MLP({SPIRALS['width']}, {SPIRALS['depth']}, '{SPIRALS['activation']}') trained for "
            f"{SPIRALS['steps']} steps at lr={SPIRALS['lr']} after torch.manual_seed({seed})"
        )
        inputs = {**SPIRALS, "seed": seed, "x_train": x_train, "y_train": y_train, "x_test": x_test}
        cases.append(Case(name, inputs, judge_only={"y_test": y_test}))
    return cases


def run_spirals(functions, case: Case) -> Outputs:
    MLP, train = functions
    i = case.inputs
    with one_thread():  # tiny matrices: extra threads only slow training down
        torch.manual_seed(i["seed"])
        model = MLP(i["width"], i["depth"], i["activation"])
        initial = _numbered("initial", model)
        losses = train(model, i["x_train"], i["y_train"], i["steps"], i["lr"])
        with torch.no_grad():
            logits = model(i["x_test"])
    return {
        "logits": logits,
        "losses": torch.tensor([_as_float(loss) for loss in losses]),
        **initial,
        **_numbered("final", model),
    }


def _numbered(stage: str, model) -> Outputs:
    """The model's parameters in `model.parameters()` order, as outputs "<stage> parameter <k>"."""
    return {f"{stage} parameter {k}": p.detach().clone() for k, p in enumerate(model.parameters())}


def _as_float(loss) -> float:
    """A loss as a float, whether train returned floats or tensors (still attached to the graph)."""
    return float(loss.detach()) if isinstance(loss, torch.Tensor) else float(loss)


def expected_parameters(width: int, depth: int) -> int:
    """2 -> width -> ... -> width -> 2, with biases."""
    if depth == 0:
        return 2 * 2 + 2
    return (2 * width + width) + (depth - 1) * (width * width + width) + (width * 2 + 2)


# The judge checks a trained model from its parameters alone: the held-out logits of the MLP
# they describe, and the training losses at the initial and the final weights. The helpers
# below take the case and the outputs, so that none of them can stand in for MLP or train.

ACTIVATION_FUNCTIONS = {"relu": torch.relu, "silu": F.silu, "sigmoid": torch.sigmoid, "tanh": torch.tanh}
FIRST_LOSS_TOLERANCE = 1e-4  # rtol and atol: the same loss, computed in another order
LAST_LOSS_TOLERANCE = (0.25, 0.02)  # (rtol, atol): one Adam step's change at the end of training


def _layers(case: Case, out: Outputs, stage: str) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """The (weight, bias) of each nn.Linear of the MLP asked for, in the order data flows through
    them, from the parameters of `stage` ("initial" or "final"). An nn.Linear registers its weight,
    then its bias, so parameters come in such pairs; the pairs are put in data-flow order by their
    shapes (2 -> width -> ... -> 2), so the order a module registers its layers in does not matter
    (hidden layers, all of one shape, in the order they were registered). None when the
    parameters are not those of such layers."""
    parameters = [out[f"{stage} parameter {k}"] for k in range(_count(out, stage))]
    pairs = list(zip(parameters[0::2], parameters[1::2], strict=False))
    if len(parameters) % 2 or any(w.dim() != 2 or b.shape != w.shape[:1] for w, b in pairs):
        return None
    sizes = [2] + [case.inputs["width"]] * case.inputs["depth"] + [2]
    layers = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        k = next((k for k, (w, _) in enumerate(pairs) if w.shape == (fan_out, fan_in)), None)
        if k is None:
            return None
        layers.append(pairs.pop(k))
    return None if pairs else layers


def _count(out: Outputs, stage: str) -> int:
    return sum(key.startswith(f"{stage} parameter ") for key in out)


def _logits(case: Case, layers: list[tuple[torch.Tensor, torch.Tensor]], x: torch.Tensor) -> torch.Tensor:
    """The MLP's forward, computed from its layers: Linear, activation, ..., Linear (trusted)."""
    activation = ACTIVATION_FUNCTIONS[case.inputs["activation"]]
    for k, (weight, bias) in enumerate(layers):
        x = F.linear(x, weight, bias)
        x = activation(x) if k < len(layers) - 1 else x
    return x


def _training_loss(case: Case, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    return F.cross_entropy(_logits(case, layers, case.inputs["x_train"]), case.inputs["y_train"])


def _loss_after_one_step(case: Case, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """The training loss after one full-batch Adam step from `layers` (a loop may record its loss
    after the step rather than before it)."""
    moving = [(w.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()) for w, b in layers]
    optimizer = torch.optim.Adam([t for layer in moving for t in layer], lr=case.inputs["lr"])
    with torch.enable_grad():
        _training_loss(case, moving).backward()
    optimizer.step()
    with torch.no_grad():
        return _training_loss(case, moving).item()


def _losses_problem(case: Case, losses: torch.Tensor, initial: list, final: list) -> str | None:
    """Whether train's losses are the losses of the weights it started from and ended with."""
    with torch.no_grad():
        before, after = _training_loss(case, initial).item(), _training_loss(case, final).item()
    first, last = losses[0].item(), losses[-1].item()
    if not _same_loss(first, before):
        stepped = _loss_after_one_step(case, initial)
        if not _same_loss(first, stepped):
            return (
                f"train's first loss is {first:.6g}, but the cross-entropy of the model's initial weights "
                f"on the training points is {before:.6g} ({stepped:.6g} after one Adam step): return the "
                "losses your loop computes, one per step"
            )
    rtol, atol = LAST_LOSS_TOLERANCE
    if abs(last - after) > atol + rtol * after:
        return (
            f"train's last loss is {last:.6g}, but the cross-entropy of the trained weights on the "
            f"training points is {after:.6g}: return the losses your loop computes, one per step"
        )
    return None


def _same_loss(got: float, want: float) -> bool:
    return math.isclose(got, want, rel_tol=FIRST_LOSS_TOLERANCE, abs_tol=FIRST_LOSS_TOLERANCE)


def _accuracy(case: Case, layers: list) -> float:
    with torch.no_grad():
        predicted = _logits(case, layers, case.inputs["x_test"]).argmax(dim=1)
    return (predicted == case.judge_only["y_test"]).float().mean().item()


def spirals_criterion(case: Case, out: Outputs) -> str | None:
    i, y_test = case.inputs, case.judge_only["y_test"]
    logits, losses = out["logits"], out["losses"]
    n_params = sum(out[f"final parameter {k}"].numel() for k in range(_count(out, "final")))
    want = expected_parameters(i["width"], i["depth"])
    if n_params != want:
        return (
            f"MLP({i['width']}, {i['depth']}) should have {i['depth']} hidden layers of {i['width']} units "
            f"between 2 inputs and 2 outputs, {want} parameters with biases; yours has {n_params}"
            + (
                " (layers in a plain Python list are not registered: use nn.Sequential or nn.ModuleList)"
                if n_params < want
                else ""
            )
        )
    if losses.shape != (i["steps"],):
        return f"train should run exactly steps={i['steps']} steps, one loss each; got {len(losses)}"
    if logits.shape != (len(y_test), 2):
        shape = tuple(logits.shape)
        return f"the model should map (N, 2) points to (N, 2) logits; got {shape} for N={len(y_test)}"
    if not torch.isfinite(logits).all():
        return "the held-out logits contain NaN or inf: is the learning rate the one given?"
    initial, final = _layers(case, out, "initial"), _layers(case, out, "final")
    if initial is None or final is None:
        return (
            f"the parameters of your model are not those of {i['depth']} nn.Linear layers of {i['width']} "
            f"units after the 2 inputs and one nn.Linear({i['width']}, 2), each with its bias"
        )
    gap = (logits.double() - _logits(case, final, i["x_test"]).double()).abs().max().item()
    if gap > 1e-4 * (1 + logits.abs().max().item()):
        return (
            f"your model's outputs are not those of the MLP its parameters describe (they differ by up to "
            f"{gap:.3g}): forward must apply its layers in order, depth x (nn.Linear then the activation), "
            "then the last nn.Linear, and compute nothing else"
        )
    problem = _losses_problem(case, losses, initial, final)
    if problem:
        return problem
    untrained = _accuracy(case, initial)
    if untrained >= THRESHOLD:
        return (
            f"your MLP classifies the held-out points before any training (accuracy {untrained:.3f} at its "
            "initial weights): it must start from nn.Linear's random initialisation, so that the check "
            "grades what train learns"
        )
    accuracy = _accuracy(case, final)
    if accuracy >= THRESHOLD:
        return None
    return (
        f"held-out accuracy {accuracy:.3f} is below the required {THRESHOLD} "
        f"(final training loss {losses[-1].item():.3g})"
    )


def _loss_decreases(case: Case, out: Outputs) -> str | None:
    losses = out["losses"]
    if losses.numel() < 2 or losses[-1] < 0.5 * losses[0]:
        return None
    return (
        f"the loss went from {losses[0].item():.3g} to {losses[-1].item():.3g}, not even halved: does every "
        "step zero the gradients, call backward, then optimizer.step()?"
    )


SPIRALS_CHECK = Check(
    name="00.spirals",
    target=("MLP", "train"),
    cases=spirals_cases,
    run=run_spirals,
    criterion=spirals_criterion,
    properties=[Property("the training loss decreases", _loss_decreases)],
    error_hints=[
        ErrorHint(
            "empty parameter list",
            "the model has no parameters: layers kept in a plain Python list are not registered. "
            "Chain them with nn.Sequential or keep them in an nn.ModuleList.",
        ),
        ErrorHint(
            "mat1 and mat2 shapes cannot be multiplied",
            "the first layer takes 2 inputs, each hidden layer `width`, and the last gives 2 logits.",
        ),
        ErrorHint("expected scalar type Long", "cross-entropy takes the labels y as int64 class indices."),
        ErrorHint("KeyError", "look the activation up by its name: 'relu', 'silu', 'sigmoid' or 'tanh'."),
    ],
    points=2,
    hidden_points=3,
    hints=[
        "MLP: a list of layers. depth times (nn.Linear then the activation), then one nn.Linear to 2 logits.",
        "The first nn.Linear takes 2 inputs; the others take `width`. nn.Sequential(*layers) chains them.",
        "train: one torch.optim.Adam(model.parameters(), lr=lr); each step: zero_grad, loss = "
        "F.cross_entropy(model(x), y), backward, step; keep loss.item().",
        "Without an activation between the layers the network is a single linear map, and no straight "
        "line separates two spirals.",
    ],
)

CHECKS = [NEURON, MSE, GRADIENT_STEP, SIGMOID, RELU, SILU, SPIRALS_CHECK]
