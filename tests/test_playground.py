"""The two-spirals data and the playground of notebook 00, driven without a browser."""

import ipywidgets as widgets
import torch

from autograder.playground import SpiralsPlayground, spirals_playground, spirals_split, two_spirals
from autograder.reference import reference_object


def reference_mlp_and_train():
    return reference_object("00.spirals", ("MLP", "train"))


def test_two_spirals_is_balanced_seeded_and_inside_the_unit_disc():
    x, y = two_spirals(101, 0.0, torch.Generator().manual_seed(3))
    assert x.shape == (101, 2) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert (y == 0).sum() == 50 and (y == 1).sum() == 51
    assert x.norm(dim=1).max() <= 1 + 1e-6
    again, _ = two_spirals(101, 0.0, torch.Generator().manual_seed(3))
    assert torch.equal(x, again)


def test_the_two_arms_are_each_other_turned_by_half_a_turn():
    x, y = two_spirals(2000, 0.0, torch.Generator().manual_seed(0))
    arm0, arm1 = x[y == 0], x[y == 1]
    # the point of arm 1 nearest to -p, for p on arm 0, is close to -p
    gaps = torch.cdist(-arm0, arm1).min(dim=1).values
    assert gaps.max() < 0.05


def test_split_is_disjoint_and_sized():
    x_train, y_train, x_test, y_test = spirals_split(torch.Generator().manual_seed(1), n_train=30, n_test=20)
    assert x_train.shape == (30, 2) and x_test.shape == (20, 2) and y_train.shape == (30,)
    assert not (torch.cdist(x_train, x_test) == 0).any()


def test_pressing_train_draws_the_boundary_and_prints_the_accuracy():
    box = spirals_playground(*reference_mlp_and_train())
    assert isinstance(box, widgets.VBox) and isinstance(box, SpiralsPlayground)
    box.width_slider.value, box.depth_slider.value, box.steps_slider.value = 16, 2, 60
    box.activation_menu.value = "tanh"
    box.train_button.click()
    outputs = box.output.outputs
    assert any("image/png" in o.get("data", {}) for o in outputs), outputs
    text = "".join(o.get("text", "") for o in outputs)
    assert "held-out accuracy" in text and "trained in" in text, text
    assert box.last_run is not None and 0 <= box.last_run.accuracy <= 1
    assert len(box.last_run.losses) == 60

    first = box.last_run.model
    box.width_slider.value = 8
    box.train_button.click()
    second = box.last_run.model
    assert second is not first
    count = lambda model: sum(p.numel() for p in model.parameters())  # noqa: E731
    assert count(first) == 2 * 16 + 16 + 16 * 16 + 16 + 16 * 2 + 2
    assert count(second) == 2 * 8 + 8 + 8 * 8 + 8 + 8 * 2 + 2
    assert len([o for o in box.output.outputs if "image/png" in o.get("data", {})]) == 1  # redrawn, not added


def test_default_settings_learn_the_spirals():
    box = spirals_playground(*reference_mlp_and_train())
    run = box.retrain()
    assert run is not None and run.accuracy >= 0.9, run and run.summary


def test_a_broken_model_is_reported_in_the_output_not_raised():
    def broken_mlp(width, depth, activation):
        raise ValueError("no such layer")

    box = spirals_playground(broken_mlp, reference_mlp_and_train()[1])
    assert box.retrain() is None
    text = "".join(o.get("text", "") for o in box.output.outputs)
    assert "ValueError: no such layer" in text
    assert not box.train_button.disabled


def test_where_widgets_do_not_render_the_playground_reads_as_one_line():
    bundle = spirals_playground(*reference_mlp_and_train())._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    text = bundle["text/plain"]
    assert text.startswith("The spirals playground: a widget") and "\n" not in text
