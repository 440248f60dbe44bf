"""The two-spirals data set and an offline playground that trains a student's MLP on it.

Trusted code: the checks of notebook 00 draw their cases with `spirals_split`, and the
notebook shows `spirals_playground(MLP, train)`, the offline counterpart of the
TensorFlow playground (width, depth, activation, learning rate; the decision boundary is
redrawn after each training run).
"""

import io
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import ipywidgets as widgets
import torch
from IPython.display import Image
from matplotlib.figure import Figure

TURNS = 1.75  # how many times each arm winds around the centre
NOISE = 0.04  # standard deviation of the Gaussian jitter added to every point
N_TRAIN, N_TEST = 300, 200
GRID_LIMIT = 1.25  # the boundary is drawn on [-GRID_LIMIT, GRID_LIMIT]^2
COLOURS = ("#1f77b4", "#ff7f0e")  # class 0, class 1
PLAIN_TEXT = "The spirals playground: a widget, shown where widgets render (JupyterLab, Jupyter Notebook)"


@contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one CPU thread inside the block, then restore the thread count.

    The matrices here are tiny (hundreds of rows, tens of columns): several threads only add
    synchronisation, and on a busy machine they can make training ten times slower.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def two_spirals(n: int, noise: float, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """n points on two interleaved spiral arms, half of them on each arm.

    A point at angle t along the arm sits at radius t / (2 pi TURNS), so radii lie in [0, 1];
    the arm of class 1 is the arm of class 0 turned by pi. The angle is drawn as
    sqrt(uniform) so that the outer turns, which are longer, get more points.

    Returns x (n, 2) float32 and y (n,) int64 with values 0 and 1 (the first n // 2 are 0).
    """
    label = (torch.arange(n) >= n // 2).long()  # (n,)
    angle = torch.rand(n, generator=generator, dtype=torch.float64).sqrt() * 2 * math.pi * TURNS
    radius = angle / (2 * math.pi * TURNS)
    turned = angle + math.pi * label
    x = torch.stack([radius * turned.cos(), radius * turned.sin()], dim=1)  # (n, 2)
    x = x + noise * torch.randn(n, 2, generator=generator, dtype=torch.float64)
    return x.float(), label


def spirals_split(
    generator: torch.Generator, n_train: int = N_TRAIN, n_test: int = N_TEST, noise: float = NOISE
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A shuffled training split and a held-out split of one two-spirals draw.

    Returns x_train (n_train, 2), y_train (n_train,), x_test (n_test, 2), y_test (n_test,).
    """
    x, y = two_spirals(n_train + n_test, noise, generator)
    order = torch.randperm(n_train + n_test, generator=generator)
    train, test = order[:n_train], order[n_train:]
    return x[train], y[train], x[test], y[test]


def draw_boundary(ax, model: torch.nn.Module, x_train, y_train, x_test, y_test, resolution: int = 150):
    """Colour the plane by the class `model` predicts; training points as dots, held-out as crosses."""
    axis = torch.linspace(-GRID_LIMIT, GRID_LIMIT, resolution)
    gx, gy = torch.meshgrid(axis, axis, indexing="xy")  # (R, R) each
    with torch.no_grad():
        grid = torch.stack([gx.reshape(-1), gy.reshape(-1)], dim=1)  # (R * R, 2)
        predicted = model(grid).argmax(dim=1).reshape(resolution, resolution)
    ax.contourf(gx, gy, predicted, levels=[-0.5, 0.5, 1.5], colors=COLOURS, alpha=0.25)
    for label in (0, 1):
        ax.scatter(*x_train[y_train == label].T, s=10, color=COLOURS[label], label=f"train, class {label}")
        ax.scatter(
            *x_test[y_test == label].T,
            s=18,
            marker="x",
            color=COLOURS[label],
            label=f"held-out, class {label}",
        )
    ax.set(xlim=(-GRID_LIMIT, GRID_LIMIT), ylim=(-GRID_LIMIT, GRID_LIMIT), aspect="equal")
    ax.set(xlabel="first input x[:, 0]", ylabel="second input x[:, 1]")


@dataclass
class PlaygroundRun:
    """What one press of Train produced."""

    model: torch.nn.Module
    losses: list[float]
    accuracy: float  # on the held-out split
    seconds: float  # training time
    png: bytes  # the decision-boundary figure

    @property
    def summary(self) -> str:
        return f"held-out accuracy {self.accuracy:.3f}, trained in {self.seconds:.2f} s"


def train_and_draw(
    MLP, train, *, width: int, depth: int, activation: str, lr: float, steps: int, seed: int = 0
) -> PlaygroundRun:
    """Train MLP(width, depth, activation) with `train` on a fixed spirals split and draw the result.

    The Train button calls this; it needs no browser, so tests call it directly.
    """
    x_train, y_train, x_test, y_test = spirals_split(torch.Generator().manual_seed(seed))
    torch.manual_seed(seed)
    model = MLP(width, depth, activation)
    with one_thread():
        start = time.perf_counter()
        losses = [float(torch.as_tensor(loss).detach()) for loss in train(model, x_train, y_train, steps, lr)]
        seconds = time.perf_counter() - start
        with torch.no_grad():
            accuracy = (model(x_test).argmax(dim=1) == y_test).float().mean().item()
        fig = Figure(figsize=(8.5, 4))
        boundary, curve = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.1]})
        draw_boundary(boundary, model, x_train, y_train, x_test, y_test)
    boundary.set_title(f"width {width}, depth {depth}, {activation}: held-out accuracy {accuracy:.2f}")
    curve.plot(losses)
    curve.set(
        title=f"training loss ({steps} steps, lr {lr:g})", xlabel="step", ylabel="cross-entropy", yscale="log"
    )
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80)
    return PlaygroundRun(model, losses, accuracy, seconds, buffer.getvalue())


class SpiralsPlayground(widgets.VBox):
    """Sliders for width, depth, learning rate and steps, an activation menu, a Train button
    and an Output that shows the decision boundary and the held-out accuracy."""

    def __init__(self, MLP, train, seed: int = 0):
        self._mlp, self._train, self._seed = MLP, train, seed
        self.width_slider = widgets.IntSlider(value=48, min=1, max=128, description="width")
        self.depth_slider = widgets.IntSlider(value=2, min=0, max=6, description="depth")
        self.activation_menu = widgets.Dropdown(
            options=["relu", "silu", "tanh", "sigmoid"], value="relu", description="activation"
        )
        self.lr_slider = widgets.FloatLogSlider(
            value=0.03, base=10, min=-4, max=0, step=0.1, description="lr", readout_format=".4f"
        )
        self.steps_slider = widgets.IntSlider(value=200, min=10, max=2000, step=10, description="steps")
        self.train_button = widgets.Button(description="Train", button_style="primary", icon="play")
        self.output = widgets.Output()
        self.last_run: PlaygroundRun | None = None
        self.train_button.on_click(lambda _: self.retrain())
        super().__init__(
            [
                widgets.HBox([self.width_slider, self.depth_slider, self.activation_menu]),
                widgets.HBox([self.lr_slider, self.steps_slider, self.train_button]),
                self.output,
            ]
        )

    def _repr_mimebundle_(self, **kwargs):
        """Where widgets do not render (a plain frontend, the feedback page), one line instead of
        the widget's reprs of its sliders."""
        bundle = super()._repr_mimebundle_(**kwargs) or {}
        bundle["text/plain"] = PLAIN_TEXT
        return bundle

    def retrain(self) -> PlaygroundRun | None:
        """Train with the current settings and replace the Output's content by the new figure."""
        self.train_button.disabled = True
        self.output.outputs = ()
        try:
            run = train_and_draw(
                self._mlp,
                self._train,
                width=self.width_slider.value,
                depth=self.depth_slider.value,
                activation=self.activation_menu.value,
                lr=self.lr_slider.value,
                steps=self.steps_slider.value,
                seed=self._seed,
            )
        except Exception as error:  # a student's bug is shown in the playground, not raised in a callback
            self.output.append_stdout(f"training failed: {type(error).__name__}: {error}\n")
            return None
        finally:
            self.train_button.disabled = False
        self.last_run = run
        self.output.append_display_data(Image(data=run.png, format="png"))
        self.output.append_stdout(run.summary + "\n")
        return run


def spirals_playground(MLP, train, seed: int = 0) -> SpiralsPlayground:
    """The playground widget (a VBox): press Train to retrain `MLP` with `train` and redraw."""
    return SpiralsPlayground(MLP, train, seed)
