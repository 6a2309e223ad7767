"""Per-task routing: the base model as a zero-shot classifier over adapter descriptions."""

from __future__ import annotations

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from trace_train.compose.routing import (
    RoutedExpert,
    RoutingConfig,
    build_routed,
    classifier_prompt,
    load_routed,
    save_routed,
    task_routing_accuracy,
    task_text,
)

TASK = [
    {"role": "system", "content": "You are an airline agent."},
    {"role": "user", "content": "Cancel my booking ABC123."},
]


@pytest.fixture(scope="module")
def policy(tiny_model_dir, random_adapters):
    experts = [
        RoutedExpert("alpha", random_adapters["alpha"], "Check preconditions before acting."),
        RoutedExpert("beta", random_adapters["beta"], "Read and aggregate structured data."),
    ]
    return build_routed(RoutingConfig(tiny_model_dir, experts))


def test_task_text_uses_only_system_and_first_user_message():
    later = TASK + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    assert task_text(later) == "You are an airline agent.\n\nCancel my booking ABC123."


def test_label_logprobs_match_the_plain_base_model(policy, tiny_model_dir):
    policy.activate("beta")  # the classifier must ignore the served adapter
    got = policy.label_logprobs(TASK)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    chat = [{"role": "user", "content": classifier_prompt(policy.config, task_text(TASK))}]
    ids = tok.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt")
    ids = ids["input_ids"] if not torch.is_tensor(ids) else ids
    with torch.no_grad():
        last = base(ids).logits[0, -1]
    labels = [tok.convert_tokens_to_ids(c) for c in "ABC"]
    torch.testing.assert_close(got, torch.log_softmax(last[labels], -1), atol=1e-5, rtol=0)
    assert "C. None of the above" in classifier_prompt(policy.config, "x")
    later = TASK + [{"role": "user", "content": "something else entirely"}]
    assert torch.equal(policy.label_logprobs(later), got)


@pytest.mark.parametrize("winner, expected", [(0, "alpha"), (1, "beta"), (2, None)])
def test_choice_is_the_top_label_and_last_label_means_base(policy, monkeypatch, winner, expected):
    scores = torch.full((3,), -5.0)
    scores[winner] = -0.1
    monkeypatch.setattr(policy, "label_logprobs", lambda messages: scores)
    assert policy.choose_adapter(TASK) == expected
    assert policy.route(TASK) == expected and policy.active == expected


def test_activated_adapter_serves_like_peft(policy, tiny_model_dir, random_adapters):
    ids = torch.tensor([[5, 9, 30, 41, 7]])
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    with torch.no_grad():
        plain = base(ids).logits
        beta = PeftModel.from_pretrained(base, random_adapters["beta"]).eval()(ids).logits
        policy.activate("beta")
        torch.testing.assert_close(policy.model(ids).logits, beta, atol=1e-5, rtol=0)
        policy.activate(None)
        torch.testing.assert_close(policy.model(ids).logits, plain, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="unknown adapter"):
        policy.activate("gamma")


def test_save_load_and_accuracy_report(policy, tmp_path):
    save_routed(policy.config, tmp_path / "r")
    loaded = load_routed(tmp_path / "r")
    assert torch.equal(loaded.label_logprobs(TASK), policy.label_logprobs(TASK))
    choice = policy.choose_adapter(TASK)
    report = task_routing_accuracy(loaded, [(TASK, choice), (TASK, "never")])
    assert report["accuracy"] == 0.5
    assert report["confusion"]["never"] == {str(choice): 1}


def test_config_validation():
    with pytest.raises(ValueError, match="description"):
        RoutedExpert("a", "x", "  ")
    with pytest.raises(ValueError, match="experts"):
        RoutingConfig("m", [])
