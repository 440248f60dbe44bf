"""Checks of notebook 00, the warm-up: a neuron, its loss and gradient, activations, an MLP.

Key: N samples, F features. The activation checks include |z| of 100 and 1000 in float32,
where formulas with e^z or e^-z in both numerator and denominator give inf / inf = NaN. The
spirals check is judged by a criterion (held-out accuracy within a step budget), not by
equality with the reference: two correct trainings differ in their floating-point details.
"""

import torch

from ..core import Case, Check, ErrorHint, Outputs, Property
from ..playground import one_thread, spirals_split

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


def autograd_step(x, y, w, b, lr) -> tuple[torch.Tensor, torch.Tensor]:
    """The same step with gradients from autograd (trusted: used by the judge only)."""
    w, b = w.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    with torch.enable_grad():
        loss = (torch.sigmoid(x @ w + b) - y).pow(2).mean()
        grad_w, grad_b = torch.autograd.grad(loss, (w, b))
    return (w - lr * grad_w).detach(), (b - lr * grad_b).detach()


def _matches_autograd(case: Case, out: Outputs) -> str | None:
    i = case.inputs
    want_w, want_b = autograd_step(i["x"], i["y"], i["w"], i["b"], i["lr"])
    got_w, got_b = out["w"], out["b"]
    if got_w.shape != want_w.shape or got_b.shape != want_b.shape:
        return None  # the shapes are reported first
    want = torch.cat([want_w - i["w"], (want_b - i["b"]).reshape(1)]).double()  # autograd's move
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


NO_AUTOGRAD = (
    "This check runs your function under torch.no_grad(), so .backward() and torch.autograd.grad cannot work "
    "here: derive dL/dw and dL/db by hand with the chain rule (the formulas above) and compute them with "
    "tensor operations."
)

GRADIENT_STEP = Check(
    name="00.gradient_step",
    target="gradient_step",
    cases=step_cases,
    run=run_step,
    properties=[Property("the step equals autograd's step", _matches_autograd)],
    error_hints=[
        ErrorHint("does not require grad", NO_AUTOGRAD),
        ErrorHint("NoneType", "w.grad is None: nothing fills it here. " + NO_AUTOGRAD),
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


def activation_check(name: str, functions: tuple[str, str], hints: list[str]) -> Check:
    return Check(
        name=f"00.{name}",
        target=functions,
        answer="activations",
        cases=activation_cases,
        run=run_activation,
        properties=[SLOPE],
        error_hints=[NOT_A_TENSOR],
        hints=hints,
        hidden_points=1.0,  # three short formulas: together worth less than the spirals question
    )


SIGMOID = activation_check(
    "sigmoid",
    ("sigmoid", "sigmoid_derivative"),
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
        losses = train(model, i["x_train"], i["y_train"], i["steps"], i["lr"])
        with torch.no_grad():
            logits = model(i["x_test"])
    return {
        "logits": logits,
        "losses": torch.tensor([_as_float(loss) for loss in losses]),
        "n_params": torch.tensor(sum(p.numel() for p in model.parameters())),
    }


def _as_float(loss) -> float:
    """A loss as a float, whether train returned floats or tensors (still attached to the graph)."""
    return float(loss.detach()) if isinstance(loss, torch.Tensor) else float(loss)


def expected_parameters(width: int, depth: int) -> int:
    """2 -> width -> ... -> width -> 2, with biases."""
    if depth == 0:
        return 2 * 2 + 2
    return (2 * width + width) + (depth - 1) * (width * width + width) + (width * 2 + 2)


def spirals_criterion(case: Case, out: Outputs) -> str | None:
    i, y_test = case.inputs, case.judge_only["y_test"]
    logits, losses, n_params = out["logits"], out["losses"], int(out["n_params"])
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
    accuracy = (logits.argmax(dim=1) == y_test).float().mean().item()
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
