import pytest
from pydantic import ValidationError

from sweet.cli import main
from sweet.config import PipelineConfig, load_config, parse_override


def test_profiles_and_overrides():
    tiny = load_config("tiny")
    assert tiny.models == PipelineConfig().models and tiny.pairs.rule == "margin" and tiny.method == "sweet"
    micro = load_config("micro", ["collect.k=5", "critic.variant=official", "models.device=cpu"])
    assert micro.collect.k == 5 and micro.critic.variant == "official" and micro.models.device == "cpu"
    assert "SmolLM2" in micro.models.policy and micro.experiment == "micro"
    assert parse_override("a.b=[1, 2]") == (["a", "b"], [1, 2])
    assert parse_override("a=hello") == (["a"], "hello")


@pytest.mark.parametrize("bad, msg", [
    (["collect.nope=1"], "unknown field 'collect.nope'"),
    (["collect.k=0"], "greater than or equal to 1"),
    (["k"], "KEY=VALUE"),
    (["collect.k.x=1"], "not a config section"),
])
def test_bad_overrides_name_the_field(bad, msg):
    with pytest.raises((ValueError, ValidationError), match=msg):
        load_config("tiny", bad)


def test_unknown_profile():
    with pytest.raises(ValueError, match="unknown profile"):
        load_config("huge")


def test_cli_config_and_bad_input(capsys):
    assert main(["config", "--profile", "micro", "--set", "collect.k=7"]) == 0
    assert '"k": 7' in capsys.readouterr().out
    assert main(["run", "--set", "critic.beta=-1"]) == 2
    assert "critic.beta" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "--stage", "no_such_stage"])


def test_every_profile_validates():
    from sweet.config import PROFILES

    for name in PROFILES:
        assert load_config(name).profile == name
    paper = load_config("paper")
    assert paper.evaluate.max_turns == 10 and paper.tasks.first_n_test == 1000
    assert paper.models.simulator.startswith("api:")


def test_api_key_is_named_never_stored():
    cfg = load_config("tiny", ["api.key_env=MY_KEY"])
    assert "MY_KEY" in cfg.model_dump_json() and cfg.api.key_env == "MY_KEY"
    with pytest.raises(ValueError, match="unknown field 'api.key'"):
        load_config("tiny", ["api.key=sk-123"])  # there is no field for the key itself


def test_methods_set_their_ablation_and_refuse_a_mislabelled_switch():
    from sweet.config import with_method

    assert load_config("tiny", ["method=no_length_norm"]).critic.length_norm is False
    assert load_config("tiny", ["method=value_head"]).critic.head == "value"
    with pytest.raises(ValueError, match="set method=no_training_info"):
        load_config("tiny", ["critic.use_training_info=false"])
    with pytest.raises(ValueError, match="method"):
        load_config("tiny", ["method=ppo"])
    back = with_method(load_config("tiny", ["method=no_length_norm"]), "sweet")
    assert back.critic.length_norm is True and back.method == "sweet"


def test_frontend_family_defaults_and_checks():
    cfg = load_config("tiny", ["task_family=frontend"])
    assert cfg.experiment == "tiny-frontend"  # its own folder, catalog and MLflow experiment
    assert (cfg.pairs.rule, cfg.pairs.min_margin) == ("margin", 0.1)  # the released frontend rule
    assert cfg.actor.rft_best_per_task and cfg.frontend.similarity == "pixel" and cfg.frontend.simulator == "dom-diff"
    # --set wins over the family defaults.
    assert load_config("tiny", ["task_family=frontend", "pairs.min_margin=0.2"]).pairs.min_margin == 0.2
    with pytest.raises(ValueError, match="pairs.rule=margin"):
        load_config("tiny", ["task_family=frontend", "pairs.rule=official"])
    with pytest.raises(ValueError, match="backend tasks only"):
        load_config("tiny", ["task_family=frontend", "tasks.generator=api:gpt-4o"])
    backend = load_config("tiny")
    assert backend.experiment == "tiny" and not backend.actor.rft_best_per_task


def test_frontend_settings_do_not_touch_backend_fingerprints():
    from sweet.stages import plan
    a = plan(load_config("tiny"))
    b = plan(load_config("tiny", ["frontend.pool_size=8"]))
    assert a == b
    f1 = plan(load_config("tiny", ["task_family=frontend"]))
    f2 = plan(load_config("tiny", ["task_family=frontend", "frontend.simulator=api:qwen-vl"]))
    assert f1["generate_tasks"] == f2["generate_tasks"] and f1["collect_trajectories"] != f2["collect_trajectories"]


def test_laptop_profile_runs_the_lite_tier_with_room_to_learn():
    from sweet.colbench.sources import load_tasks

    cfg = load_config("laptop")
    tasks = load_tasks(cfg.tasks.source)
    assert cfg.experiment == "laptop" and cfg.tasks.source == "bundled:lite"
    assert cfg.tasks.n_train <= sum(t.split == "train" for t in tasks)
    # every one of the tier's 50 held-out tasks (the paired comparison pairs them)
    assert sum(t.split == "test" for t in tasks) == 50 == cfg.tasks.n_test
    # several sampled trajectories per task (pairs need two rewards of one task) and per held-out task (paired test)
    assert cfg.collect.max_turns >= 3 and cfg.collect.k >= 4 and cfg.collect.temperature > 0
    assert cfg.evaluate.n_samples >= 1 and cfg.evaluate.temperature == cfg.collect.temperature
    # the critic's best-of-N curve reaches N = 8 on some held-out tasks
    assert cfg.evaluate.diagnostic_samples >= 8 and cfg.evaluate.diagnostic_tasks >= 2
    # run L's recipe: dialogues that ask end with code; unmarked code before the last turn is never chosen
    assert cfg.backend.answer_prefill and cfg.candidates.unmarked_code == "rank_last"
    assert cfg.engine.backend == "llamacpp"  # the CPU engine: the 90-minute budget is measured on it
    # the 0.5B critic base: the 135M ranked a run's held-out pairs at chance (0.474 vs 0.694)
    assert cfg.models.critic_base == "Qwen/Qwen2.5-Coder-0.5B-Instruct"
    # candidates long enough to hold a whole answer (the micro diagnosis: cut-off candidates teach prose)
    assert cfg.candidates.max_new_tokens >= cfg.collect.max_new_tokens
    # run E's two actor epochs (chosen on the validation file, README "Does it learn?"); one critic epoch (budget)
    assert cfg.critic.epochs >= 1 and cfg.actor.epochs == 2
    # one pair per forward, the defaults' global batch of 2 per optimiser step (faster on the CPU, the same update)
    for section in (cfg.critic, cfg.actor):
        assert (section.batch_size, section.grad_accum) == (1, 2)


@pytest.mark.parametrize("name", ["paper-backend", "paper", "paper-frontend", "paper-eq"])
def test_paper_profiles_load_the_released_recipe(name):
    """The paper profiles' recipe (README, Fidelity): full fine-tuning at 2e-7, the released critic, optimiser,
    actor NLL, baseline epochs / batch, evaluation sampling and simulator view."""
    cfg = load_config(name)
    c, a, e = cfg.critic, cfg.actor, cfg.evaluate
    for section in (c, a):  # the released optimiser, in both training stages
        assert (section.schedule, section.min_lr_ratio, section.warmup_ratio) == ("cosine", 0.1, 0.03)
        assert section.adam_betas == (0.9, 0.95)
        if section is a or name != "paper-frontend":  # full fine-tuning at 2e-7
            assert section.lora is False and section.lr == 2e-7
    if name == "paper-frontend":  # the paper's Qwen2-VL critic, a LoRA (tests/test_vlm_critic.py)
        assert (c.kind, c.lora) == ("vlm", True)
    elif name == "paper-eq":  # the paper's Eq. 2-3 critic with its NLL term, in its own experiment
        assert (c.variant, c.nll_coef, cfg.experiment) == ("paper", 0.01, "paper-eq")
    else:  # the released critic: one token mean, no NLL term
        assert (c.variant, c.nll_coef) == ("official", 0.0)
    assert c.epochs == (8 if name == "paper-frontend" else 4)
    assert (a.beta, a.nll_coef, a.nll_scope, a.epochs) == (0.1, 0.01, "sequence", 1)
    rft, mt_dpo, sweet = (a.for_method(m) for m in ("rft", "mt_dpo", "sweet"))
    assert (rft.epochs, rft.grad_accum, mt_dpo.epochs, mt_dpo.grad_accum) == (4, 4, 8, 1)
    assert sweet == a and a.batch_size * a.grad_accum == 1 and rft.batch_size * rft.grad_accum * 8 == 32
    assert e.temperature == 1.0 and e.n_samples >= 2 and e.max_turns == 10
    if cfg.task_family == "backend":
        assert cfg.backend.simulator_view == "transcript" and e.scoring == "official"
    assert cfg.agent_view == "system"  # the instructions as a system message, as released


def test_cpu_profiles_keep_lora_greedy_chat_and_transformers_optimiser():
    for name in ("tiny", "laptop", "micro"):
        cfg = load_config(name)
        assert cfg.actor.lora and cfg.critic.lora and cfg.actor.nll_scope == "action"
        assert cfg.backend.simulator_view == "chat" and cfg.agent_view == "user"
        for section in (cfg.critic, cfg.actor):
            assert (section.schedule, section.warmup_ratio, section.adam_betas) == ("linear", 0.0, (0.9, 0.999))
    assert load_config("tiny").evaluate.temperature == 0.0  # greedy; the laptop samples (paired comparison)
    assert load_config("tiny", ["actor.rft_epochs=3"]).actor.for_method("rft").epochs == 3
    assert load_config("tiny", ["actor.rft_epochs=3"]).actor.for_method("sweet").epochs == 1
    with pytest.raises(ValidationError):
        load_config("tiny", ["critic.adam_betas=[0.9, 1.5]"])


def test_the_simulator_view_counts_in_backend_fingerprints_only():
    from sweet.stages import plan
    chat, transcript = plan(load_config("tiny")), plan(load_config("tiny", ["backend.simulator_view=transcript"]))
    changed = {s for s in chat if chat[s] != transcript[s]}
    assert {"collect_trajectories", "evaluate"} <= changed and "generate_tasks" not in changed
    f1 = plan(load_config("tiny", ["task_family=frontend"]))
    f2 = plan(load_config("tiny", ["task_family=frontend", "backend.simulator_view=transcript"]))
    assert f1 == f2  # the frontend's simulator compares pages; it reads no dialogue


def test_the_agent_view_counts_where_episodes_start():
    """Collection and evaluation open their episodes by agent_view (both families); pairs, critic and candidates
    read the stored dialogues, so they change only through their inputs."""
    from sweet.pipeline import config_slice
    from sweet.stages import BY_NAME

    for family in ("backend", "frontend"):
        user = load_config("tiny", [f"task_family={family}"])
        system = load_config("tiny", [f"task_family={family}", "agent_view=system"])
        changed = {name for name, st in BY_NAME.items()
                   if config_slice(user, st.config_keys) != config_slice(system, st.config_keys)}
        assert {"collect_trajectories", "evaluate"} <= changed, family
        assert not changed & {"generate_tasks", "build_preference_pairs", "train_critic", "train_actor"}, family
    with pytest.raises(ValidationError):
        load_config("tiny", ["agent_view=assistant"])
