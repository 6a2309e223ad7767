"""Router training end to end: two adapters that behave differently on two prompt families.

Until trace_gym's environments land, the "environments" are two prompt families and the
reward is whether the model emitted that family's tool call. Each LoRA is trained a few SFT
steps to emit its own family's call on its own family's prompts (so on the other family it
emits the wrong call), then a router is trained on rollouts labelled by family.
"""

from __future__ import annotations

import random

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from trace_train.compose.moe import (
    ExpertSpec,
    MoEConfig,
    RouterSpec,
    attach_experts,
    load_moe,
    save_moe,
)
from trace_train.compose.router_training import (
    LabelledSequence,
    RouterTrainingConfig,
    closed_loop_check,
    token_routing_accuracy,
    train_routers,
)

NAMES = ["Ada", "Bo", "Cy", "Di", "Ed", "Flo", "Gus", "Hal", "Ida", "Jo", "Kim", "Lu"]
FAMILIES = {
    "precondition": (
        "Before you cancel order {n} for {name}, is the account verified?",
        '<tool_call>{"name": "check_account"}</tool_call>',
    ),
    "table": (
        "Read table {n} and count the rows where {name} is the owner.",
        '<tool_call>{"name": "count_rows"}</tool_call>',
    ),
}


def family_prompts(tok, family, seed, count):
    template, _ = FAMILIES[family]
    rng = random.Random(seed)
    msgs = [template.format(n=rng.randint(1, 99), name=rng.choice(NAMES)) for _ in range(count)]
    return [
        tok.apply_chat_template(
            [{"role": "user", "content": m}], add_generation_prompt=True, tokenize=False
        )
        for m in msgs
    ]


def reward_for(family):
    target = FAMILIES[family][1]
    return lambda completion: float(completion.strip().startswith(target))


def sft_adapter(base_dir, tok, family, out_dir, steps=60):
    """A LoRA trained to answer its own family's prompts with that family's tool call."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    peft_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=targets))
    prompts = family_prompts(tok, family, seed=1, count=16)
    target = FAMILIES[family][1] + "<|im_end|>"
    rows = [(tok(p).input_ids, tok(target).input_ids) for p in prompts]
    width = max(len(p) + len(c) for p, c in rows)
    ids = torch.full((len(rows), width), tok.pad_token_id)
    labels = torch.full_like(ids, -100)
    mask = torch.zeros_like(ids)
    for i, (p, c) in enumerate(rows):  # left padding, loss on the completion only
        seq = torch.tensor(p + c)
        ids[i, width - len(seq) :] = seq
        labels[i, width - len(c) :] = torch.tensor(c)
        mask[i, width - len(seq) :] = 1
    opt = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(steps):
        loss = peft_model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    peft_model.save_pretrained(out_dir)
    return str(out_dir)


def rollouts(model, tok, family, prompts):
    """Sequences (prompt + own-expert greedy completion) labelled with the family's expert."""
    state = model.trace_moe
    out = []
    with torch.no_grad(), state.forced(family):
        for p in prompts:
            ids = tok(p, return_tensors="pt").input_ids
            gen = model.generate(ids, max_new_tokens=16, do_sample=False)
            out.append(LabelledSequence(gen[0].tolist(), family))
    return out


@pytest.fixture(scope="module")
def trained_moe(tiny_model_dir, tmp_path_factory):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    root = tmp_path_factory.mktemp("sft_adapters")
    experts = [
        ExpertSpec(name=f, adapter_dir=sft_adapter(tiny_model_dir, tok, f, root / f), capability=f)
        for f in FAMILIES
    ]
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    attach_experts(model, MoEConfig(tiny_model_dir, experts, RouterSpec()))
    train = [s for f in FAMILIES for s in rollouts(model, tok, f, family_prompts(tok, f, 2, 12))]
    result = train_routers(model, train, RouterTrainingConfig(steps=150))
    held_out = {f: family_prompts(tok, f, seed=7, count=10) for f in FAMILIES}
    test = [s for f in FAMILIES for s in rollouts(model, tok, f, held_out[f])]
    return model, tok, result, held_out, test


def test_adapters_behave_differently(trained_moe):
    model, tok, _, held_out, _ = trained_moe
    for family in FAMILIES:
        other = next(f for f in FAMILIES if f != family)
        report = closed_loop_check(
            model, tok, {other: (held_out[family], reward_for(family))}, max_new_tokens=16
        )
        assert report[other]["expert"] <= 0.2  # the other expert fails this family
        report = closed_loop_check(
            model, tok, {family: (held_out[family], reward_for(family))}, max_new_tokens=16
        )
        assert report[family]["expert"] >= 0.9  # its own expert solves it


def test_router_sends_each_family_to_its_expert_and_keeps_reward(trained_moe, capsys):
    model, tok, result, held_out, test = trained_moe
    acc = token_routing_accuracy(model, test)
    families = {f: (held_out[f], reward_for(f)) for f in FAMILIES}
    report = closed_loop_check(model, tok, families, max_new_tokens=16)
    with capsys.disabled():
        print(f"\nrouter train acc {result.accuracy}\nheld-out routing {acc}\nrewards {report}")
    assert acc["mean"] >= 0.8
    for family in FAMILIES:
        assert acc["per_slot"][family] >= 0.75
        assert report[family]["ratio"] >= 0.95, report


def test_trained_router_survives_save_load(trained_moe, tmp_path):
    model, tok, _, _, test = trained_moe
    save_moe(model, tmp_path / "moe", tokenizer=tok)
    loaded, _ = load_moe(tmp_path / "moe")
    ids = torch.tensor([test[0].input_ids])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)
    assert (
        token_routing_accuracy(loaded, test)["mean"] == token_routing_accuracy(model, test)["mean"]
    )
