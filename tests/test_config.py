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
    assert cfg.tasks.n_test == sum(t.split == "test" for t in tasks) == 50  # every held-out task
    # several sampled trajectories per task (pairs need two rewards of one task) and per held-out task (paired test)
    assert cfg.collect.max_turns >= 3 and cfg.collect.k >= 4 and cfg.collect.temperature > 0
    assert cfg.evaluate.n_samples >= 3 and cfg.evaluate.temperature == cfg.collect.temperature
    assert cfg.engine.backend == "llamacpp"  # the CPU engine: the 90-minute budget is measured on it
    # the 0.5B critic base: the 135M ranked a run's held-out pairs at chance (0.474 vs 0.694)
    assert cfg.models.critic_base == "Qwen/Qwen2.5-Coder-0.5B-Instruct"
    # candidates long enough to hold a whole answer (the micro diagnosis: cut-off candidates teach prose)
    assert cfg.candidates.max_new_tokens >= cfg.collect.max_new_tokens
