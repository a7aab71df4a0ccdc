"""The paper's actor recipe on a tiny Qwen2 (CPU): full fine-tuning against a frozen reference (the SWEET actor, RFT
and multi-turn DPO), the released run's NLL over the whole chosen sequence computed by hand, and the released
optimiser schedule as the Trainer builds it."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

from sweet.algos import actor as A
from sweet.algos import baselines as B
from sweet.algos.training import training_kwargs
from sweet.config import ActorConfig, CriticConfig
from sweet.models import load_policy, trained_actor
from sweet.profiles import RELEASED_OPTIM
from tests.test_algos import Recorder, dialogue, save_tiny_qwen2
from tests.test_baselines import GOOD, perturb

ROWS = [{"prompt": dialogue(1 + i % 3)[:-1], "chosen": GOOD, "rejected": "What types?"} for i in range(4)]


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> str:
    return save_tiny_qwen2(tmp_path_factory.mktemp("tiny_qwen2_actor_recipe"))


def state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def full_ft(**kw) -> ActorConfig:
    return ActorConfig(**{"lora": False, "lr": 1e-3, "epochs": 1, "batch_size": 4, "max_length": 128,
                          "save_steps": 10, **kw})


@pytest.mark.parametrize("scope", ["action", "sequence"])
def test_full_ft_actor_one_step_moves_every_weight_against_a_frozen_reference(tiny_model_dir, tmp_path, scope):
    cfg = full_ft(nll_scope=scope)
    trainer, _ = A.dpo_trainer(ROWS, tiny_model_dir, tmp_path, cfg, device="cpu")
    assert not hasattr(trainer.model, "peft_config") and trainer.ref_model is not None
    assert trainer.ref_model is not trainer.model
    base = state(AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32))
    rec = Recorder()
    trainer.add_callback(rec)
    trainer.train()
    assert rec.steps == [1]  # 4 rows, batch 4
    # Policy == reference before the step: DPO's term is log 2 exactly (the loss adds the NLL term on top).
    first = next(x for x in rec.logs if "loss" in x)
    assert first["rewards/margins"] == 0.0 and first["loss"] > math.log(2)
    after, ref = state(trainer.model), state(trainer.ref_model)
    assert all(torch.equal(ref[k], base[k]) for k in base)  # the reference never moves
    assert all(not torch.equal(after[k], base[k]) for k in base)  # no adapter: every weight tensor trained


def test_train_dpo_full_ft_saves_a_whole_model_that_evaluation_loads(tiny_model_dir, tmp_path):
    out = A.train_dpo(ROWS, tiny_model_dir, tmp_path, full_ft(nll_scope="sequence"))
    assert (out / "model.safetensors").exists() and not (out / "adapter_config.json").exists()
    assert (out / "actor_config.json").exists()
    ref, adapter = trained_actor(tiny_model_dir, out)
    assert (ref, adapter) == (str(out), None)  # evaluated as a model of its own, on any engine
    policy = load_policy(ref, adapter, "cpu")
    assert policy.generate(torch.tensor([[1, 5, 6]]), max_new_tokens=3, do_sample=False).shape == (1, 6)


@pytest.mark.parametrize("method", ["rft", "mt_dpo"])
def test_baselines_train_fully_too(tiny_model_dir, tmp_path, method):
    if method == "rft":
        out = B.train_rft([{"messages": dialogue(1 + i % 2, GOOD)} for i in range(4)], tiny_model_dir, tmp_path,
                          full_ft())
    else:
        pairs = [{"chosen": dialogue(1 + i % 2, GOOD), "rejected": dialogue(2, "What?")} for i in range(4)]
        trainer, _ = B.mt_dpo_trainer(pairs, tiny_model_dir, tmp_path, full_ft())
        batch = trainer.data_collator(trainer.train_dataset)
        with torch.no_grad():  # policy == frozen reference at the start: the DPO term is log 2
            trainer.compute_loss(trainer.model, batch)
        assert trainer._metrics["rewards/margins"][0] == 0.0
        out = B.train_mt_dpo(pairs, tiny_model_dir, tmp_path, full_ft())
    assert (out / "model.safetensors").exists() and trained_actor("base", out) == (str(out), None)
    base = state(AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32))
    trained = state(AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32))
    assert any(not torch.equal(trained[k], base[k]) for k in base)


def rendered(tok, messages, generation_prompt=False) -> list[int]:
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
    return tok(text, add_special_tokens=False)["input_ids"]


def hand_logps(model, ids: list[int]) -> list[float]:
    """log p(ids[k] | ids[<k]) for k = 1 .. len-1, from one plain forward."""
    lp = model(input_ids=torch.tensor([ids])).logits[0].float().log_softmax(-1)
    return [lp[k - 1, ids[k]].item() for k in range(1, len(ids))]


def test_sequence_nll_trainer_loss_equals_hand_computation(tiny_model_dir, tmp_path):
    """nll_scope 'sequence': DPO on each action's summed log-probs (content + end of turn) plus nll_coef times the
    mean over rows of each chosen sequence's mean token NLL, every token after the first included."""
    rows = [{"prompt": dialogue(2)[:-1], "chosen": GOOD, "rejected": "What types?"},
            {"prompt": dialogue(1)[:-1], "chosen": "Is a negative?", "rejected": "I WANT TO ANSWER: def f(x): x"}]
    cfg = ActorConfig(nll_scope="sequence", lr=1e-2, batch_size=2, lora_r=4, lora_alpha=8, max_length=256,
                      beta=0.5, nll_coef=0.5)
    trainer, tok = A.dpo_trainer(rows, tiny_model_dir, tmp_path, cfg, device="cpu")
    assert isinstance(trainer, A.SequenceNLLTrainer)
    model = trainer.model
    perturb(model)  # a trained-looking adapter: pi_theta != pi_ref
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(rows))])
    eot = tok.convert_tokens_to_ids("<|im_end|>")

    def action_and_sequence(row, side, m):
        head, full = rendered(tok, row["prompt"], True), rendered(tok, row["prompt"] + [
            {"role": "assistant", "content": row[side]}])
        lps = hand_logps(m, full)  # lps[k - 1] is token k's
        end = full.index(eot, len(head))
        return sum(lps[k - 1] for k in range(len(head), end + 1)), lps

    with torch.no_grad():
        loss = trainer.compute_loss(model, batch).item()
        pol = {s: [action_and_sequence(r, s, model) for r in rows] for s in ("chosen", "rejected")}
        with model.disable_adapter():
            ref = {s: [action_and_sequence(r, s, model)[0] for r in rows] for s in ("chosen", "rejected")}
    dpo = sum(math.log1p(math.exp(-cfg.beta * ((pol["chosen"][k][0] - ref["chosen"][k])
                                               - (pol["rejected"][k][0] - ref["rejected"][k])))) for k in range(2)) / 2
    nll = sum(-sum(lps) / len(lps) for _, lps in pol["chosen"]) / 2
    action_only = -sum(a for a, _ in pol["chosen"]) / 2
    assert abs(pol["chosen"][0][0] - ref["chosen"][0]) > 0.1  # the adapter moved the policy off pi_ref
    assert loss == pytest.approx(dpo + cfg.nll_coef * nll, rel=1e-4)
    assert trainer._metrics["nll"][0] == pytest.approx(nll, rel=1e-4) and nll != pytest.approx(action_only)


def test_released_optimiser_warms_up_decays_to_a_tenth_and_defaults_stay_transformers(tiny_model_dir, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    steps = 100

    def schedule(cfg):
        trainer = Trainer(model=model, args=TrainingArguments(**training_kwargs(cfg, tmp_path, "cpu")))
        trainer.create_optimizer_and_scheduler(num_training_steps=steps)
        lrs = []
        for _ in range(steps):
            lrs.append(trainer.lr_scheduler.get_last_lr()[0])
            trainer.optimizer.step()
            trainer.lr_scheduler.step()
        return trainer.optimizer.param_groups[0]["betas"], lrs

    betas, lrs = schedule(CriticConfig(lr=1.0, **RELEASED_OPTIM))
    assert betas == (0.9, 0.95)
    # ceil(3% of 100) = 3 warm-up steps from 0 (transformers' cosine_with_min_lr, the scheduler OpenRLHF builds too)
    assert lrs[:4] == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0])
    assert lrs[-1] == pytest.approx(0.1, abs=1e-3) and min(lrs[3:]) >= 0.1 - 1e-9
    betas, lrs = schedule(ActorConfig(lr=1.0))  # the CPU default: transformers' own AdamW and linear decay
    assert betas == (0.9, 0.999) and lrs[0] == 1.0 and lrs[50] == pytest.approx(0.5)
    plain = TrainingArguments(output_dir=str(tmp_path))
    args = TrainingArguments(**training_kwargs(ActorConfig(), tmp_path, "cpu"))
    assert (args.lr_scheduler_type, args.adam_beta1, args.adam_beta2, args.warmup_steps) == \
        (plain.lr_scheduler_type, plain.adam_beta1, plain.adam_beta2, plain.warmup_steps)
