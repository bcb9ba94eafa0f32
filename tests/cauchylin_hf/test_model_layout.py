"""The model's doors stay narrow: options travel in records below them.

Every feature used to add keywords to ``forward`` and lines to ``model.py`` (21 named arguments
and 1,201 lines before the decoding options moved into ``Decoding``, the readout context into
``ReadoutContext``, the encoding into ``features.py``). These budgets fail when a change adds a
loose option or a new idea to the model's file; such a change belongs in a record or in a file
of its own (CONTRIBUTING's layout)."""

from __future__ import annotations

import inspect
from pathlib import Path

import cauchylin_hf.model as model_module
from cauchylin_hf import CauchyLMForCausalLM

FORWARD_BUDGET = 14
LINES_BUDGET = 900


def test_forward_names_few_arguments_and_every_one_is_documented():
    params = inspect.signature(CauchyLMForCausalLM.forward).parameters
    named = [n for n, p in params.items() if n != "self" and p.kind != p.VAR_KEYWORD]
    assert len(named) <= FORWARD_BUDGET, named
    doc = inspect.getdoc(CauchyLMForCausalLM.forward) or ""
    missing = [n for n in named if f"    {n}:" not in doc]
    assert not missing, missing


def test_the_model_file_stays_under_its_line_budget():
    lines = Path(inspect.getfile(model_module)).read_text(encoding="utf-8").count("\n")
    assert lines < LINES_BUDGET, f"model.py has {lines} lines"
