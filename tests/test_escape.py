"""The escape hatch reported with a break gbfix leaves in place."""

from __future__ import annotations

from gbfix.escape import hatch
from gbfix.records import Cause


def test_gbfix_advice_for_the_common_codes():
    assert hatch(Cause("GB0124", "Unsupported Tensor.item() call", "")).startswith("read the number outside")


def test_dynamos_hint_from_the_raised_message_comes_first():
    cause = Cause("GB0142", "Unsupported context manager", "", ("Use a nullcontext here.",))
    assert hatch(cause) == "use a nullcontext here."


def test_registry_hints_split_into_sentences_and_unhelpful_ones_skipped():
    # GB0014's registry hints: "Set ...allow_rnn=True ..." then "It may be possible to write Dynamo tracing rules..."
    assert hatch(Cause("GB0014", "Attempted to wrap RNN, GRU, or LSTM", "")).startswith(
        "set torch._dynamo.config.allow_rnn=True"
    )


def test_line_wrapped_registry_hints_are_joined():
    text = hatch(Cause("GB0246", "one_hot", ""))
    assert text.startswith("explicitly set the `num_classes` param of the function call")


def test_data_dependent_expression_without_a_code():
    assert "torch._check" in hatch(Cause(None, "Data-dependent expression", ""))


def test_last_resort_names_the_cost():
    text = hatch(Cause(None, "SomethingNew", ""))
    assert "torch.compiler.disable" in text and "GB0098" in text
