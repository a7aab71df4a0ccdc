"""Critic / actor / dialogue-mask tests on a tiny real Qwen2 model built from a config (fast, CPU only)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, TrainerCallback

from sweet.algos import actor as A
from sweet.algos import critic as C
from sweet.algos.dialogue import DialogueTooLong, tokenize_dialogue, with_training_info
from sweet.algos.training import lora_config
from sweet.config import ActorConfig, CriticConfig
from sweet.models import load_policy

MODELS = Path(__file__).resolve().parents[1] / "artifacts/models"
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
CORPUS = ["def add(a, b):\n    return a + b", "What should the function return for negative numbers?",
          "I WANT TO ANSWER: def f(x): return x * 2", "The output is a list of strings sorted by length.",
          "You are a helpful agent. Ask clarifying questions, then answer.", "I don't know."]


def build_chatml_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on a few sentences, with ChatML specials and template: no download, no artifacts."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   chat_template=CHATML)


def dialogue(n_turns: int = 2, final: str = "I WANT TO ANSWER: def add(a, b): return a + b") -> list[dict]:
    msgs = [{"role": "system", "content": "You are a helpful agent."},
            {"role": "user", "content": "Write add(a, b)."}]
    for t in range(n_turns - 1):
        msgs += [{"role": "assistant", "content": f"Question {t}: what types?"},
                 {"role": "user", "content": f"Answer {t}: integers."}]
    return msgs + [{"role": "assistant", "content": final}]


def save_tiny_qwen2(path) -> str:
    """A 2-layer Qwen2 with fixed random weights and the ChatML test tokenizer, saved to `path` (shared by the
    critic, baseline and value-head tests)."""
    tok = build_chatml_tokenizer()
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    Qwen2ForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> str:
    return save_tiny_qwen2(tmp_path_factory.mktemp("tiny_qwen2"))


def tokenizers_under_test():
    yield pytest.param(build_chatml_tokenizer, id="chatml-bpe")
    # The real tokenizers, once converted into artifacts/ (fresh CI machines skip them).
    for name in ("smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct"):
        path = MODELS / name
        yield pytest.param(lambda p=path: AutoTokenizer.from_pretrained(p), id=name,
                           marks=pytest.mark.skipif(not (path / "tokenizer_config.json").exists(),
                                                    reason=f"{name} not converted"))


# ------------------------------------------------------------------------------------------------ dialogue
@pytest.mark.parametrize("make_tok", tokenizers_under_test())
def test_spans_decode_to_exactly_the_assistant_turns(make_tok):
    tok = make_tok()
    msgs = dialogue(3)
    out = tokenize_dialogue(tok, msgs)
    want = [m["content"] + "<|im_end|>" for m in msgs if m["role"] == "assistant"]
    assert [tok.decode(out["input_ids"][s:e]) for s, e in out["turn_spans"]] == want
    # Everything outside the spans is the rest of the template: headers, system, user turns.
    assert out["input_ids"] == tok(tok.apply_chat_template(msgs, tokenize=False), add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("make_tok", tokenizers_under_test())
def test_long_dialogue_drops_oldest_turns_keeps_problem_and_final(make_tok):
    tok = make_tok()
    msgs = dialogue(4)
    full = len(tokenize_dialogue(tok, msgs)["input_ids"])
    out = tokenize_dialogue(tok, msgs, max_length=full - 1)
    text = tok.decode(out["input_ids"])
    assert len(out["input_ids"]) <= full - 1
    assert "Write add(a, b)." in text and "Question 0" not in text and "Question 2" in text  # one exchange dropped
    assert tok.decode(out["input_ids"][slice(*out["turn_spans"][-1])]) == msgs[-1]["content"] + "<|im_end|>"
    with pytest.raises(DialogueTooLong):
        tokenize_dialogue(tok, msgs, max_length=10)


def test_non_prefix_preserving_template_is_refused():
    tok = build_chatml_tokenizer()
    # Renders the number of messages up front: a prefix of the dialogue is not a prefix of its tokens.
    tok.chat_template = "{{ messages|length }}" + CHATML
    with pytest.raises(ValueError, match="prefix-preserving"):
        tokenize_dialogue(tok, dialogue(2))


def test_training_info_goes_into_the_system_message_only():
    msgs = dialogue(2)
    out = with_training_info(msgs, "def add(a, b): return a + b")
    assert out[0]["content"].startswith(msgs[0]["content"]) and out[0]["content"].endswith("return a + b")
    assert out[1:] == msgs[1:] and "Reference" not in msgs[0]["content"]  # input untouched


# ------------------------------------------------------------------------------------------------ scoring
def critic_model(model_dir: str, perturb: bool):
    from peft import get_peft_model

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model = get_peft_model(base, lora_config(4, 8)).eval()
    if perturb:  # a trained-looking adapter: B != 0
        g = torch.Generator().manual_seed(1)
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.data = torch.randn(p.shape, generator=g) * 0.5
    return model, AutoTokenizer.from_pretrained(model_dir)


CANDS = ["What types?", "I WANT TO ANSWER: def add(a, b): return a + b", "", "Is a negative?"]


def test_zero_init_lora_gives_advantage_exactly_zero(tiny_model_dir):
    model, tok = critic_model(tiny_model_dir, perturb=False)
    hist = dialogue(2)[:-1]
    assert C.score_candidates(model, tok, hist, CANDS, "ref code") == [0.0] * len(CANDS)
    batch = C.collate_pairs([C.encode_pair(tok, {"chosen": dialogue(2), "rejected": dialogue(3), "training_info": "c"},
                                           CriticConfig())], tok.pad_token_id)
    target = batch["turn_ids"] >= 0
    lp = C.token_logps(model, batch["input_ids"], batch["attention_mask"], target)
    with model.disable_adapter():
        ref = C.token_logps(model, batch["input_ids"], batch["attention_mask"], target)
    assert torch.equal(lp, ref) and (lp[target] < 0).all()


@pytest.mark.parametrize("ref_c", [True, False])
def test_shared_prefix_scores_equal_independent_passes(tiny_model_dir, ref_c):
    model, tok = critic_model(tiny_model_dir, perturb=True)
    hist = dialogue(3)[:-1]
    kw = dict(ref_with_training_info=ref_c)
    fast = C.score_candidates(model, tok, hist, CANDS, "def add(a, b): return a + b", shared_prefix=True, **kw)
    slow = C.score_candidates(model, tok, hist, CANDS, "def add(a, b): return a + b", shared_prefix=False, **kw)
    assert max(abs(a - b) for a, b in zip(fast, slow)) < 1e-4
    assert len(set(round(s, 6) for s in fast)) == len(CANDS)  # non-trivial: the adapter separates candidates
    summed = C.score_candidates(model, tok, hist, CANDS[:1], "def add", length_norm=False)
    mean = C.score_candidates(model, tok, hist, CANDS[:1], "def add")
    n_tok = len(tok(CANDS[0] + "<|im_end|>", add_special_tokens=False)["input_ids"])
    assert summed[0] == pytest.approx(mean[0] * n_tok, rel=1e-4)


# ------------------------------------------------------------------------------------------------ training
def critic_pairs(n: int) -> list[dict]:
    good, bad = "I WANT TO ANSWER: def add(a, b): return a + b", "I WANT TO ANSWER: def f(x): return x * 2"
    return [{"chosen": dialogue(1 + i % 2, good), "rejected": dialogue(1 + (i + 1) % 2, bad),
             "training_info": "def add(a, b):\n    return a + b"} for i in range(n)]


class Recorder(TrainerCallback):
    def __init__(self, stop_at: int | None = None):
        self.logs, self.steps, self.stop_at = [], [], stop_at

    def on_log(self, args, state, control, logs=None, **kw):
        self.logs.append(dict(logs or {}))

    def on_step_end(self, args, state, control, **kw):
        self.steps.append(state.global_step)
        if self.stop_at is not None and state.global_step >= self.stop_at:
            raise KeyboardInterrupt("simulated crash")


def lora_b(adapter_dir: Path) -> dict[str, torch.Tensor]:
    return {k: v for k, v in load_file(adapter_dir / "adapter_model.safetensors").items() if "lora_B" in k}


@pytest.mark.parametrize("variant", ["paper", "official"])
def test_train_critic_learns_and_resumes(tiny_model_dir, tmp_path, variant):
    cfg = CriticConfig(variant=variant, lr=2e-2, epochs=4, batch_size=2, save_steps=2, lora_r=4, lora_alpha=8,
                       max_length=256)
    pairs = critic_pairs(4)  # 2 steps per epoch, 8 steps
    crash = Recorder(stop_at=3)
    with pytest.raises(KeyboardInterrupt):
        C.train_critic(pairs, tiny_model_dir, tmp_path, cfg, callbacks=[crash])
    assert (tmp_path / "checkpoints/checkpoint-2").is_dir() and not (tmp_path / "critic").exists()
    rec = Recorder()
    out = C.train_critic(pairs, tiny_model_dir, tmp_path, cfg, callbacks=[rec])
    assert rec.steps[0] == 3 and rec.steps[-1] == 8  # resumed after checkpoint-2, not from scratch
    assert out == tmp_path / "critic" and (out / "tokenizer_config.json").exists()
    assert all(v.abs().sum() > 0 for v in lora_b(out).values())  # the adapter moved away from zero init
    # Zero-init LoRA: advantages are exactly 0 at the first step, so the BT loss starts at log 2.
    assert crash.logs[0]["bt_loss"] == pytest.approx(math.log(2), abs=1e-6)
    train_logs = [entry for entry in rec.logs if "bt_loss" in entry]
    assert train_logs[-1]["bt_loss"] < math.log(2) - 0.05 and train_logs[-1]["reward_accuracy"] == 1.0
    assert {"nll", "reward_margin"} <= set(train_logs[-1])
    # Scoring with the trained critic ranks the chosen final answer above the rejected one.
    model, tok = C.load_critic(out, "cpu")
    hist = pairs[0]["chosen"][:-1]
    good, bad = C.score_candidates(model, tok, hist, [pairs[0]["chosen"][-1]["content"],
                                                      pairs[0]["rejected"][-1]["content"]], pairs[0]["training_info"])
    assert good > bad


def test_train_critic_is_deterministic_and_resume_matches_uninterrupted(tiny_model_dir, tmp_path):
    cfg = CriticConfig(lr=1e-2, epochs=2, batch_size=2, save_steps=1, lora_r=4, lora_alpha=8, max_length=256)
    a = lora_b(C.train_critic(critic_pairs(6), tiny_model_dir, tmp_path / "a", cfg))
    b = lora_b(C.train_critic(critic_pairs(6), tiny_model_dir, tmp_path / "b", cfg))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(KeyboardInterrupt):  # crash mid-epoch 2 (step 5 of 6), resume from checkpoint-4
        C.train_critic(critic_pairs(6), tiny_model_dir, tmp_path / "c", cfg, callbacks=[Recorder(stop_at=5)])
    c = lora_b(C.train_critic(critic_pairs(6), tiny_model_dir, tmp_path / "c", cfg))
    assert all(torch.allclose(a[k], c[k], atol=1e-6) for k in a)


def test_train_critic_rejects_bad_pairs(tiny_model_dir, tmp_path):
    with pytest.raises(KeyError, match="training_info"):
        C.train_critic([{"chosen": dialogue(1), "rejected": dialogue(1)}], tiny_model_dir, tmp_path, CriticConfig())


# ------------------------------------------------------------------------------------------------- actor
def test_select_pairs_deterministic_and_ordered():
    scored = [{"candidate": f"c{i}", "score": s} for i, s in enumerate([0.3, -1.0, 2.0, 0.1, 0.9, -0.2, 0.3, 5.0])]
    a = A.select_pairs(scored, 3, random.Random(7))
    assert a == A.select_pairs(scored, 3, random.Random(7)) and len(a) == 3
    assert len({(c["candidate"], r["candidate"]) for c, r in a}) == 3  # distinct pairs
    ranked = sorted(s["score"] for s in scored)
    for c, r in a:
        assert c["score"] >= r["score"] and c["score"] >= ranked[4] and r["score"] <= ranked[3]
    assert A.select_pairs(scored[:1], 2, random.Random(0)) == []
    assert len(A.select_pairs(scored, 100, random.Random(0))) == 16  # 4 top x 4 bottom


def test_a_never_chosen_candidate_may_be_rejected_but_never_chosen():
    # c2 and c7 carry the two best scores; the rule ranks them below everything, so only the other six compete
    scored = [{"candidate": f"c{i}", "score": s} for i, s in enumerate([0.3, -1.0, 2.0, 0.1, 0.9, -0.2, 0.3, 5.0])]
    rule = lambda d: d["candidate"] in ("c2", "c7")
    pairs = A.select_pairs(scored, 100, random.Random(0), never_chosen=rule)
    assert {c["candidate"] for c, _ in pairs} == {"c4", "c0", "c6", "c3"}  # the best four of the rest
    assert {r["candidate"] for _, r in pairs} == {"c2", "c7", "c1", "c5"}  # the demoted two are in the bottom half
    # all demoted: no pair can be chosen, so none is made
    assert A.select_pairs(scored, 100, random.Random(0), never_chosen=lambda d: True) == []
    # no rule: the paper's ranking, unchanged
    assert A.select_pairs(scored, 3, random.Random(7), never_chosen=None) == A.select_pairs(scored, 3, random.Random(7))


def test_unmarked_code_is_a_function_without_the_answer_marker():
    from sweet.colbench.backend import ANSWER_MARK

    code = "```python\ndef fine(days):\n    return min(5, 0.25 * days)\n```"
    assert A.unmarked_code("Clarifying Question: how should fines work?\nFinal Answer:\n" + code)
    assert not A.unmarked_code(f"{ANSWER_MARK}\n{code}")
    assert not A.unmarked_code(f"{ANSWER_MARK.lower()}\n{code}")  # the environment reads the marker in any case
    assert not A.unmarked_code("What is the fine per day, and is there a cap?")
    assert not A.unmarked_code("Should I define the cap as a constant?")  # 'define' in prose is not a def


def test_unparsed_answer_is_the_marker_without_a_function_that_parses():
    from sweet.colbench.backend import ANSWER_MARK

    code = "```python\ndef fine(days):\n    return min(5, 0.25 * days)\n```"
    # run M's actor: the marker in front of a question or a description ends the episode on prose
    assert A.unparsed_answer(f"{ANSWER_MARK} What is the weekly wage of the phone agents?")
    assert A.unparsed_answer(f"{ANSWER_MARK} The function `fine` returns the fine, capped.")
    assert A.unparsed_answer(f"How much will the fund be worth next year?\n\n{ANSWER_MARK}")
    assert A.unparsed_answer(f"{ANSWER_MARK}\n```python\ndef fine(days:\n    return 0\n```")  # does not parse
    assert not A.unparsed_answer(f"{ANSWER_MARK}\n{code}")
    assert not A.unparsed_answer(f"{ANSWER_MARK.lower()} def fine(days):\n    return min(5, 0.25 * days)")
    assert not A.unparsed_answer("What is the fine per day, and is there a cap?")  # a question: no marker
    assert not A.unparsed_answer("Clarifying Question:\n" + code)  # unmarked code is the other rule's


def test_the_unmarked_code_rule_applies_only_before_a_backend_episodes_last_turn():
    from sweet.colbench.backend import Episode
    from sweet.config import load_config
    from sweet.stages.candidates import never_chosen

    early = [{"role": "user", "content": "Write fine(days)."}]
    last = [{"role": "user", "content": "It is 0.25 a day." + Episode.LAST_NOTE}]
    cfg = load_config("micro", ["candidates.unmarked_code=rank_last"])
    rule = never_chosen(early, cfg)
    assert rule({"candidate": "def fine(d):\n    return d"}) and not rule({"candidate": "What is the rate?"})
    assert never_chosen(last, cfg) is None  # the last turn's answer is scored as it is
    assert never_chosen(early, load_config("micro", [])) is None  # off by default: the paper's ranking
    marked_prose = {"candidate": "I WANT TO ANSWER: What is the rate?"}
    assert not rule(marked_prose)  # the unparsed-answer rule is off
    both = never_chosen(early, load_config("micro", ["candidates.unmarked_code=rank_last",
                                                      "candidates.unparsed_answer=rank_last"]))
    assert both(marked_prose) and both({"candidate": "def fine(d):\n    return d"})
    assert not both({"candidate": "What is the rate?"})
    assert not both({"candidate": "I WANT TO ANSWER:\n```python\ndef fine(d):\n    return d\n```"})
    only = never_chosen(early, load_config("micro", ["candidates.unparsed_answer=rank_last"]))
    assert only(marked_prose) and not only({"candidate": "def fine(d):\n    return d"})
    assert never_chosen(last, load_config("micro", ["candidates.unparsed_answer=rank_last"])) is None


def test_first_turn_asking_counts_questions_chosen_minus_rejected():
    """The candidates stage's reading of what the first-turn DPO pairs teach about asking (README, *Run R*, *Run T*)."""
    from sweet.colbench.backend import ANSWER_MARK, message_kind
    from sweet.stages.candidates import first_turn_asking

    ask, answer, code = "What is the daily rate?", f"{ANSWER_MARK}\ndef fine(d):\n    return d", "def fine(d): ..."
    assert [message_kind(t) for t in (ask, answer, code, "i want to answer: 3", "Sure, tell me more.")] == [
        "question", "answer (marker)", "code, no marker", "marker misspelt", "prose"]
    pairs = [{"chosen": ask, "rejected": answer}, {"chosen": ask, "rejected": code},
             {"chosen": answer, "rejected": ask}, {"chosen": ask, "rejected": "Is it 0.25? " + code}]
    assert first_turn_asking(pairs) == {"first_turn_dpo_pairs": 4, "first_turn_question_net": 2}
    assert first_turn_asking([{"chosen": ask, "rejected": ask + " And the cap?"}])["first_turn_question_net"] == 0
    assert first_turn_asking([]) == {"first_turn_dpo_pairs": 0, "first_turn_question_net": 0}


def hand_completion_logps(model, tok, prompt: list[dict], completion: str) -> list[float]:
    """log p of each token of `completion` after `prompt`, from one plain forward: the completion is the assistant
    message as the chat template renders it after the prompt's generation header (what TRL's DPO trains on)."""
    def render(msgs, generation_prompt):
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=generation_prompt)
        return tok(text, add_special_tokens=False)["input_ids"]
    head, full = render(prompt, True), render(prompt + [{"role": "assistant", "content": completion}], False)
    assert full[:len(head)] == head
    logp = model(input_ids=torch.tensor([full])).logits[0].float().log_softmax(-1)
    return [logp[k - 1, full[k]].item() for k in range(len(head), len(full))]


def test_train_dpo_end_to_end(tiny_model_dir, tmp_path):
    rows = [{"prompt": dialogue(1 + i % 3)[:-1], "chosen": "I WANT TO ANSWER: def add(a, b): return a + b",
             "rejected": "What types?"} for i in range(4)]
    # One batch of all 4 rows per epoch, 2 epochs: 2 steps, a checkpoint after each.
    cfg = ActorConfig(lr=1e-2, epochs=2, batch_size=4, save_steps=1, lora_r=4, lora_alpha=8, max_length=64)
    crash = Recorder(stop_at=2)
    with pytest.raises(KeyboardInterrupt):
        A.train_dpo(rows, tiny_model_dir, tmp_path, cfg, callbacks=[crash])
    # Step 1 by hand: the zero-init LoRA is pi_ref, so the DPO term is log 2 exactly, plus nll_coef x the mean token
    # NLL of the 4 chosen completions under the base model (the prompts as build_dpo_dataset shortened them).
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    ds = A.build_dpo_dataset(tok, rows, cfg.max_length)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    with torch.no_grad():
        chosen = [hand_completion_logps(base, tok, ds[i]["prompt"], rows[i]["chosen"]) for i in range(4)]
    nll = -sum(sum(c) for c in chosen) / sum(len(c) for c in chosen)
    first = crash.logs[0]
    assert first["rewards/margins"] == 0.0
    assert first["loss"] == pytest.approx(math.log(2) + cfg.nll_coef * nll, abs=1e-5)
    assert first["logps/chosen"] == pytest.approx(sum(sum(c) for c in chosen) / 4, rel=1e-4)
    rec = Recorder()
    out = A.train_dpo(rows, tiny_model_dir, tmp_path, cfg, callbacks=[rec])
    assert out == tmp_path / "actor" and rec.steps == [2]  # resumed from checkpoint-1
    assert rec.logs[0]["rewards/margins"] > 0  # step 1 moved the policy toward the chosen actions
    assert (tmp_path / "checkpoints/checkpoint-2").is_dir()
    assert all(v.abs().sum() > 0 for v in lora_b(out).values())
    assert json.loads((out / "adapter_config.json").read_text())["r"] == 4
    # The longest prompt was shortened (oldest exchange dropped) instead of being cut or dropped by TRL.
    assert len(ds) == 4 and ds[2]["prompt"][:2] == rows[2]["prompt"][:2]
    assert len(ds[2]["prompt"]) < len(rows[2]["prompt"])
    policy = load_policy(tiny_model_dir, out, "cpu")
    assert not hasattr(policy, "peft_config")  # merged
    gen = policy.generate(torch.tensor([[1, 5, 6]]), max_new_tokens=3, do_sample=False)
    assert gen.shape == (1, 6)
