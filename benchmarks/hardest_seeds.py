"""Find the hidden seeds on which correct answers come closest to failing; pin them for the tests.

    .venv/bin/python benchmarks/hardest_seeds.py [--seeds N] [--keep K] [CHECK ...]

For every check (or the ones named), each correct answer (the reference and the alternatives
of solutions/*/alternatives.py) is judged on the hidden cases of seeds 0 .. N-1 as the grader
judges them; the script ends in failure, naming them, if any of them does not pass (their
seeds are pinned all the same). Each (answer, seed) gets a margin, how near it came to
failing, 1 being the edge:
- a check judged against the reference: the largest |got - want| / (atol + rtol |want|) over
  every value, with the check's tolerance for the output's dtype (what torch.isclose allows);
- a check judged by a criterion: a measure of its own (CRITERION_MARGINS);
- 09.generate, whose sampled draws are measurements judged by a property: that property's own
  ratio (CRITERION_MARGINS too); 09.top_p's draws the same way, its other cases by the tolerance
  (MEASURED_MARGINS).
The K seeds of the largest margin, and each answer's worst seed, are written to
tests/helpers/hardest_seeds.json with the answers' names and a fingerprint of the cases they draw;
`test_correct_answers_never_fail_by_chance` runs them on every test run and fails when the
fingerprint or the answers no longer match. Run this after changing a check's hidden cases,
its tolerance or its alternatives (name the checks to scan only those). The 25 checks of
notebooks 00-07 took 9 minutes on an idle 2-core machine, 00.spirals 5 of them and
02.pe_figure 2.
"""

import argparse
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autograder.api import live_expectations, make_cases  # noqa: E402
from autograder.checks import CHECKS, kv_cache, transformer  # noqa: E402
from autograder.checks.warmup import THRESHOLD  # noqa: E402
from autograder.core import Case, Check, Expectation, Outputs, judge, run_stage  # noqa: E402
from autograder.reference import reference_object  # noqa: E402
from tests.helpers.alternatives import ALTERNATIVES  # noqa: E402
from tests.helpers.hardest_seeds import answer_names, fingerprint, load, save  # noqa: E402


def tolerance_margin(check: Check, result: Outputs, reference: Outputs) -> float:
    """The largest |got - want| / (atol + rtol |want|) over the answers (not the measurements);
    values torch.isclose calls equal count 0."""
    worst = 0.0
    for key in check.answer_keys(reference):
        got, want = result[key].to(reference[key].dtype), reference[key]
        if not (want.is_floating_point() or want.is_complex()):
            worst = max(worst, 0.0 if torch.equal(got, want) else float("inf"))
            continue
        rtol, atol = check.tolerance(want.dtype)
        same = torch.isclose(got, want, rtol=0, atol=0, equal_nan=True)
        ratio = (got - want).abs().double() / (atol + rtol * want.abs().double())
        worst = max(worst, float(ratio.masked_fill(same, 0).max()) if ratio.numel() else 0.0)
    return worst


def spirals_margin(case: Case, result: Outputs) -> float:
    """The held-out error rate over the error rate the accuracy threshold allows."""
    accuracy = (result["logits"].argmax(dim=1) == case.judge_only["y_test"]).double().mean().item()
    return (1 - accuracy) / (1 - THRESHOLD)


def smoke_margin(case: Case, result: Outputs) -> float:
    """How far the untrained loss is from log V, over the distance the check allows."""
    tokens, v = case.inputs["tokens"], case.inputs["vocabulary_size"]
    loss = torch.nn.functional.cross_entropy(result["logits"][0, :-1].double(), tokens[0, 1:]).item()
    return abs(loss - math.log(v)) / transformer.LOG_V_MARGIN


def training_margin(case: Case, result: Outputs) -> float:
    """The held-out loss over the bound it must stay under."""
    logits = result["next-character logits"].double()
    return torch.nn.functional.cross_entropy(logits, case.judge_only["next"]).item() / transformer.LOSS_BOUND


def sampled_margin(case: Case, result: Outputs) -> float:
    """09.generate, whose sampled draws are measured (never compared with the reference's): the
    largest count of a new token, away from its expected count, over the bound of the property that
    judges them (kv_cache.step_margins). Its greedy cases match the reference's tokens exactly, or
    fail: 0."""
    if case.concern != kv_cache.SAMPLED:
        return 0.0
    margins = kv_cache.step_margins(case, result["sampled"], result.get("sampled_calls"))
    return math.inf if margins is None else float(margins.max())


def nucleus_draws_margin(case: Case, result: Outputs) -> float | None:
    """09.top_p's draws, measured as 09.generate's: the largest count away from what the nucleus
    gives, over the property's bound (kv_cache.draw_margins); None for its cases compared with the
    reference (top_p_filter's), which take the tolerance margin."""
    if case.concern != kv_cache.DRAWS:
        return None
    return float(kv_cache.draw_margins(case, result["draws"], case.inputs["nucleus"]).max())


# Checks with some cases whose outputs are measured, judged by properties: their margin, or None
# for a case compared with the reference.
MEASURED_MARGINS = {"09.top_p": nucleus_draws_margin}

CRITERION_MARGINS = {
    "00.spirals": spirals_margin,
    "08.smoke_test": smoke_margin,
    "08.training": training_margin,
    "09.generate": sampled_margin,  # not a criterion check: its measured draws are judged by properties
}


def scan(name: str, seeds: range) -> tuple[dict[tuple[str, int], float], list[str]]:
    """(answer, seed) -> margin for every correct answer of the check, and the failures among
    them (a failure's margin is infinite: its seed is pinned first)."""
    check = CHECKS[name]
    if check.criterion is not None and name not in CRITERION_MARGINS:
        raise SystemExit(f"{name} is judged by a criterion: add its margin to CRITERION_MARGINS")
    answers = dict(
        zip(answer_names(name), [reference_object(name, check.target), *ALTERNATIVES[name]], strict=True)
    )
    margins, failures = {}, []
    for seed in seeds:
        cases = make_cases(name, hidden=True, seed=seed)
        expected, _ = live_expectations(name, cases, with_mistakes=False)
        for answer_name, answer in answers.items():
            results = run_stage(check, answer, cases)
            verdict = judge(check, cases, results, expected, [])
            if not verdict.passed:
                failures.append(f"{name}: {answer_name}, seed {seed}: {verdict.message}")
                margins[answer_name, seed] = float("inf")
                continue
            margins[answer_name, seed] = max(
                (
                    _margin(name, check, case, result, want)
                    for case, result, want in zip(cases, results, expected, strict=True)
                    if _passes_alone(check, case, result, want)
                ),
                default=0.0,
            )
    return margins, failures


def _margin(name: str, check: Check, case: Case, result: Outputs, want: Expectation) -> float:
    if name in CRITERION_MARGINS:
        return CRITERION_MARGINS[name](case, result)
    measured = MEASURED_MARGINS[name](case, result) if name in MEASURED_MARGINS else None
    return tolerance_margin(check, result, want.reference) if measured is None else measured


def _passes_alone(check: Check, case: Case, result: Outputs | str, want: Expectation) -> bool:
    """Whether the case passes on its own: one can fail in a passing verdict when its concern
    is advice only, worth no points, and then no seed it comes from can cost any."""
    verdict = judge(check, [case], [result], [want], [])
    return all(part.passed for part in verdict.parts) if verdict.parts else verdict.passed


def hardest(margins: dict[tuple[str, int], float], keep: int) -> dict[int, float]:
    """seed -> its largest margin over the answers, hardest first: the `keep` hardest seeds, and
    each answer's own worst (none for an answer that matches the reference exactly on every
    seed, as the reference does)."""
    by_seed: dict[int, float] = {}
    for (_, seed), margin in margins.items():
        by_seed[seed] = max(by_seed.get(seed, 0.0), margin)
    hardest_first = sorted(by_seed, key=lambda seed: (-by_seed[seed], seed))
    chosen = set(hardest_first[:keep])
    for answer in dict.fromkeys(a for a, _ in margins):
        worst = max((s for a, s in margins if a == answer), key=lambda s: margins[answer, s])
        if margins[answer, worst] > 0:
            chosen.add(worst)
    return {seed: by_seed[seed] for seed in hardest_first if seed in chosen}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checks", nargs="*", help="checks to scan (default: all)")
    parser.add_argument("--seeds", type=int, default=300, help="scan seeds 0 .. N-1")
    parser.add_argument("--keep", type=int, default=3, help="seeds of the largest margins to pin")
    args = parser.parse_args()
    if unknown := sorted(set(args.checks) - set(CHECKS)):
        raise SystemExit(f"no check {', '.join(unknown)}")
    failures = []
    for name in args.checks or CHECKS:
        start = time.perf_counter()
        margins, failed = scan(name, range(args.seeds))
        worst = hardest(margins, args.keep)
        seeds = list(worst)
        pinned = load()  # read again for each check: another scan may have pinned its own meanwhile
        pinned["checks"][name] = {
            "seeds": seeds,
            "margins": {str(seed): float(f"{margin:.3g}") for seed, margin in worst.items()},
            "answers": answer_names(name),
            "cases": fingerprint(name, seeds),
            "scanned": args.seeds,
        }
        save(pinned)  # after each check: a long scan stopped midway keeps what it found
        failures += failed
        shown = ", ".join(f"seed {seed}: {margin:.3g}" for seed, margin in worst.items())
        print(f"{name:<30} {shown} ({time.perf_counter() - start:.0f} s)", flush=True)
    if failures:  # pinned all the same: the test fails on them until the check is fixed
        raise SystemExit("correct answers fail on scanned seeds:\n" + "\n".join(failures))


if __name__ == "__main__":
    main()
