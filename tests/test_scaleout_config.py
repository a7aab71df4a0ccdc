"""Scale-out configuration: the engine section, the paper profiles, the shipped accelerate configs and the
`accelerate launch` command line (nothing is launched; accelerate's own loader and parser check the results)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from sweet.config import SHIPPED_ACCELERATE, EngineConfig, PipelineConfig, accelerate_config_path, load_config
from sweet.launch import accelerate_argv, visible_gpus

# Where the shipped configs are in this checkout, written out here rather than taken from the code under test.
SHIPPED_DIR = Path(__file__).resolve().parents[1] / "configs" / "accelerate"


def test_engine_defaults_keep_the_cpu_path_and_every_field_is_described():
    e = PipelineConfig().engine
    assert (e.backend, e.launcher, e.accelerate_config, e.num_processes) == ("hf", "local", "zero3", 0)
    assert (e.tensor_parallel_size, e.data_parallel_size, e.gpu_memory_utilization, e.max_model_len) == (1, 1, 0.85, 0)
    assert all(f.description for f in EngineConfig.model_fields.values())  # the Prefect run form shows them
    assert "engine" in PipelineConfig.model_json_schema()["properties"]


@pytest.mark.parametrize("setting, field", [("engine.backend=vllm", "engine.backend"),
                                            ("engine.launcher=accelerate", "engine.launcher")])
def test_gpu_paths_on_a_cpu_config_name_the_field(setting, field):
    with pytest.raises(ValidationError, match=field):
        load_config("micro", [setting, "models.device=cpu"])
    assert load_config("micro", [setting]).models.device == "auto"  # 'auto' may find a GPU: allowed


def test_accelerate_config_is_a_shipped_name_or_an_existing_file(tmp_path):
    assert load_config("tiny", ["engine.accelerate_config=fsdp"]).engine.accelerate_config == "fsdp"
    own = tmp_path / "mine.yaml"
    own.write_text("distributed_type: MULTI_GPU\n")
    assert load_config("tiny", [f"engine.accelerate_config={own}"]).engine.accelerate_config == str(own)
    with pytest.raises(ValidationError, match="neither a shipped config"):
        load_config("tiny", [f"engine.accelerate_config={tmp_path / 'missing.yaml'}"])
    with pytest.raises(ValidationError, match="engine.tensor_parallel_size|greater than or equal to 1"):
        load_config("tiny", ["engine.tensor_parallel_size=0"])


@pytest.mark.parametrize("name", ["paper", "paper-backend", "paper-frontend"])
def test_paper_profiles_load_with_the_paper_settings(name, monkeypatch):
    monkeypatch.delenv("SWEET_SIMULATOR_URL", raising=False)
    cfg = load_config(name)
    frontend = name == "paper-frontend"
    assert cfg.profile == name and cfg.models.policy == "meta-llama/Llama-3.1-8B-Instruct"
    if frontend:  # the paper's frontend critic: Qwen2-VL-7B reading screenshots (tests/test_vlm_critic.py)
        assert (cfg.models.critic_base, cfg.critic.kind) == ("Qwen/Qwen2-VL-7B-Instruct", "vlm")
    else:  # the released critic (no NLL term); the recipe as a whole: tests/test_config.py
        assert cfg.models.critic_base == cfg.models.policy and cfg.critic.kind == "text"
        assert (cfg.critic.lora, cfg.critic.lr, cfg.critic.beta, cfg.critic.nll_coef) == (False, 2e-7, 0.1, 0.0)
    assert (cfg.actor.beta, cfg.actor.nll_coef, cfg.actor.epochs) == (0.1, 0.01, 1)
    assert (cfg.candidates.n, cfg.candidates.temperature) == (16, 1.0)
    assert cfg.collect.max_turns == cfg.evaluate.max_turns == 10
    assert (cfg.engine.backend, cfg.engine.launcher, cfg.engine.accelerate_config) == ("vllm", "accelerate", "zero3")
    assert cfg.models.device == "cuda"
    assert cfg.critic.epochs == (8 if frontend else 4)
    sim = cfg.frontend.simulator if frontend else cfg.models.simulator
    model = "Qwen/Qwen2-VL-72B-Instruct" if frontend else "meta-llama/Llama-3.1-70B-Instruct"
    assert sim == f"api:{model}@http://127.0.0.1:8000/v1"


def test_paper_frontend_gets_its_family_defaults():
    cfg = load_config("paper-frontend")
    assert cfg.task_family == "frontend" and cfg.experiment == "paper-frontend"
    assert (cfg.pairs.rule, cfg.pairs.min_margin) == ("margin", 0.1)  # the released frontend rule
    assert cfg.actor.rft_best_per_task and cfg.frontend.similarity == "clip:openai"
    assert cfg.tasks.source == "data/colbench_frontend"
    backend = load_config("paper-backend")
    assert backend.task_family == "backend" and backend.pairs.rule == "official"
    assert backend.collect.offline_path.endswith("colbench_code_offline_15k_llama8b.jsonl")
    assert load_config("paper").model_dump(exclude={"profile"}) == backend.model_dump(exclude={"profile"})


def test_simulator_url_is_read_from_the_environment_when_the_profile_loads(monkeypatch):
    monkeypatch.setenv("SWEET_SIMULATOR_URL", "http://sim-node:8000/v1/")
    assert load_config("paper-backend").models.simulator.endswith("@http://sim-node:8000/v1")
    assert load_config("paper-frontend").frontend.simulator.endswith("@http://sim-node:8000/v1")
    assert load_config("paper-backend").api.base_url == ""  # other API systems (GPT-4o) keep their own server
    monkeypatch.setenv("SWEET_SIMULATOR_URL", "sim-node:8000")
    with pytest.raises(ValueError, match="SWEET_SIMULATOR_URL"):
        load_config("paper-backend")
    assert load_config("tiny").models.simulator.startswith("Qwen/")  # profiles without the placeholder: untouched


# ------------------------------------------------------------------------------------------ accelerate configs
@pytest.mark.parametrize("name, kind, precision", [("zero3", "DEEPSPEED", "bf16"), ("fsdp", "FSDP", "bf16"),
                                                   ("ddp", "MULTI_GPU", "no")])
def test_shipped_accelerate_configs_parse_with_accelerates_loader(name, kind, precision):
    from accelerate.commands.config.config_args import load_config_from_file

    cfg = load_config_from_file(str(accelerate_config_path(name)))
    assert cfg.distributed_type.value == kind and cfg.mixed_precision == precision
    if name == "ddp":  # precision from the training arguments; runs on CPU processes where there is no GPU
        assert not cfg.use_cpu
    elif name == "zero3":
        ds = cfg.deepspeed_config
        assert ds["zero_stage"] == 3 and ds["offload_param_device"] == ds["offload_optimizer_device"] == "none"
    else:
        fsdp = cfg.fsdp_config
        assert fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
        assert fsdp["fsdp_version"] == 2 and fsdp["fsdp_reshard_after_forward"] is True  # = FULL_SHARD


def test_accelerate_argv_single_node():
    argv = accelerate_argv("sweet.train_entry", ["--stage", "critic", 3], EngineConfig(), env={}, gpus_per_node=8)
    assert argv == [sys.executable, "-m", "accelerate.commands.launch",
                    "--config_file", str(SHIPPED_DIR / "zero3.yaml"), "--num_processes", "8",
                    "-m", "sweet.train_entry", "--stage", "critic", "3"]
    assert accelerate_argv("m", [], EngineConfig(num_processes=4), env={}, gpus_per_node=8)[6] == "4"
    with pytest.raises(RuntimeError, match="no GPU"):
        accelerate_argv("m", [], EngineConfig(), env={}, gpus_per_node=0)
    with pytest.raises(ValueError, match="module name"):
        accelerate_argv("-c", [], EngineConfig(), env={}, gpus_per_node=1)


def test_accelerate_argv_multi_node_from_the_environment(tmp_path):
    own = tmp_path / "own.yaml"
    own.write_text("distributed_type: FSDP\n")
    env = {"ACCELERATE_NUM_MACHINES": "2", "ACCELERATE_MACHINE_RANK": "0", "SWEET_MACHINE_RANK": "1",
           "ACCELERATE_MAIN_PROCESS_IP": "node0", "SWEET_MAIN_PROCESS_PORT": "29500"}
    argv = accelerate_argv("m", ["a"], EngineConfig(accelerate_config=str(own)), env=env, gpus_per_node=4)
    flags = dict(zip(argv[3:-3:2], argv[4:-3:2]))
    assert flags == {"--config_file": str(own), "--num_processes": "8", "--num_machines": "2",
                     "--machine_rank": "1", "--main_process_ip": "node0", "--main_process_port": "29500"}
    assert argv[-3:] == ["-m", "m", "a"]
    with pytest.raises(ValueError, match="MAIN_PROCESS_IP"):
        accelerate_argv("m", [], EngineConfig(), env={"SWEET_NUM_MACHINES": "2"}, gpus_per_node=4)
    with pytest.raises(ValueError, match="SWEET_MACHINE_RANK"):
        accelerate_argv("m", [], EngineConfig(), env={"SWEET_MACHINE_RANK": "first"}, gpus_per_node=4)


@pytest.mark.parametrize("name, flag", [("zero3", "use_deepspeed"), ("fsdp", "use_fsdp")])
def test_accelerate_accepts_the_argv_and_merges_the_config(name, flag):
    # The same parser and validation `accelerate launch` runs before it starts any process.
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    argv = accelerate_argv("sweet.train_entry", ["--x", "1"], EngineConfig(accelerate_config=name),
                           env={"SWEET_NUM_MACHINES": "2", "SWEET_MAIN_PROCESS_IP": "node0"}, gpus_per_node=8)
    args = launch_command_parser().parse_args(argv[3:])
    result = _validate_launch_command(args)
    args = result[0] if isinstance(result, tuple) else args
    assert getattr(args, flag) and args.module and args.training_script == "sweet.train_entry"
    assert (args.num_processes, args.num_machines, args.training_script_args) == (16, 2, ["--x", "1"])
    assert args.mixed_precision == "bf16"


def test_visible_gpus_follows_cuda_visible_devices():
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,1,3"}) == 3
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == 0
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == 0


def test_each_shipped_name_resolves_to_its_file_of_the_checkout_and_no_other_file_is_shipped():
    names = {"zero3", "fsdp", "ddp"}
    assert set(SHIPPED_ACCELERATE) == names
    assert {n: accelerate_config_path(n) for n in names} == {n: SHIPPED_DIR / f"{n}.yaml" for n in names}
    assert sorted(p.name for p in SHIPPED_DIR.iterdir()) == sorted(f"{n}.yaml" for n in names)
    # A path is taken as given; an unknown name that is no file is refused.
    assert accelerate_config_path(str(SHIPPED_DIR / "ddp.yaml")) == SHIPPED_DIR / "ddp.yaml"
    with pytest.raises(ValueError, match="neither a shipped config"):
        accelerate_config_path("zero2")
