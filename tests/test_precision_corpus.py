"""Ordinary architectures lint clean: no warning that is not true, one finding per problem.

Each model of ``precision_corpus`` (tied embeddings, eval BatchNorm, training-only parameters,
weight-normed vocoders, cloned attention blocks, zero biases, PT2E-quantized nets, RoPE and
sinusoidal positions, ...) goes through the guarded export as ``export-guards lint
--fail-level warning`` does, is delegated whole, and its program runs and matches eager.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch

import export_guards as eg
import precision_corpus
from export_guards.verify import Tolerance, compare_outputs, run_pte

pytestmark = [pytest.mark.slow]  # a corpus of architectures, exported and run


TOLERANCE = {"float": 1e-3, "quantized": 5e-2}  # a quantized net is compared with its own eager model


@pytest.mark.parametrize("name", sorted(precision_corpus.FACTORIES))
def test_an_ordinary_model_has_no_warning_and_one_finding_per_problem(name: str) -> None:
    model, inputs = precision_corpus.FACTORIES[name]()
    result = eg.export_with_guards(model, inputs)

    problems = result.report.at_least(eg.Severity.WARNING)
    assert not problems, "\n".join(str(f) for f in problems)
    per_subject = Counter((f.code, f.method, f.constant or f.node) for f in result.report)
    repeated = [key for key, count in per_subject.items() if count > 1]
    assert not repeated, f"reported more than once: {repeated}"
    folded = [f.constant for f in result.report.with_code("EG201")]
    assert len(folded) == len(set(folded))  # one finding per folded parameter
    assert result.delegation is not None and result.delegation.fraction_delegated == 1.0

    pte = result.to_pte()
    assert not eg.check_pte(pte).findings
    with torch.no_grad():
        eager = model(*inputs)
    tolerance = TOLERANCE["quantized" if name.startswith("pt2e_") else "float"]
    errors = compare_outputs(eager, run_pte(pte, inputs), Tolerance.absolute(atol=tolerance, rtol=tolerance))
    assert all(e.within for e in errors), "\n".join(map(str, errors))


def test_with_the_fold_off_each_reparametrized_weight_is_one_warning() -> None:
    model, inputs = precision_corpus.FACTORIES["hifigan_like"]()
    report = eg.lint(torch.export.export(model, inputs), fold=False)
    warnings = report.at_least(eg.Severity.WARNING)
    assert {f.code for f in warnings} == {"EG212"}  # not EG210 beside it for the same weight
    reparametrized = [m for m in model.modules() if torch.nn.utils.parametrize.is_parametrized(m)]
    assert len(warnings) == len(reparametrized) == len({f.constant for f in warnings})
