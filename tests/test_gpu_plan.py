"""GPU plans (debatelab.gpu_plan): each job's GPUs from its models' weights and KV cache, worked by hand."""

from __future__ import annotations

import json

import pytest
from workflow_helpers import REPO_ROOT

from debatelab import gpu_plan as gp
from debatelab.config import load_experiment

GIB = 2**30
H800 = gp.GpuType("h800", 80 * GIB, 8)


def _udpo():
    return load_experiment(REPO_ROOT / "config/experiments/udpo.yaml")


def test_kv_cache_per_token_from_a_config_json():
    # Qwen3-8B: 36 layers, 8 KV heads of 128 dims; K and V in bf16: 2 * 36 * 8 * 128 * 2 = 147,456 bytes
    config = {"num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128}
    assert gp.kv_bytes_per_token(config, 2) == 147_456
    # no head_dim: hidden / heads; no KV heads: every head (multi-head attention); a multimodal
    # config's text model is the one that holds the cache
    assert (
        gp.kv_bytes_per_token({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64}, 4)
        == 2 * 2 * 4 * 16 * 4
    )
    assert gp.kv_bytes_per_token({"text_config": config, "vision_config": {}}, 2) == 147_456


def test_the_udpo_ensemble_debate_needs_eight_gpus_worked_by_hand():
    """mad_n5 loads all five models. Per GPU of 72 GiB usable (0.9 × 80), with 2 GiB overhead each:
    Scout 108.6e9 × 2 B = 202.3 GiB + 32,768 × 196,608 B = 6 GiB KV, over its tensor_parallel 4 = 52.1 GiB
    + 2 -> 4 GPUs; Mixtral 87.0 + 4 GiB over 2 -> 2 GPUs; Phi-4 27.4 + 6.25 + 2 = 35.6 GiB opens GPU 6,
    Qwen3-8B 15.3 + 4.5 + 2 = 21.8 joins it (36.4 left); Gemma-3n 14.6 + 2.2 + 2 = 18.8 does not fit the
    14.6 left and takes GPU 7: 8 GPUs, an H800 node's 8."""
    plan = gp.experiment_job_plan(_udpo(), "debate", {"dataset": "gsm8k", "protocol": "mad_n5"}, H800)
    assert plan.gpus == 8
    assert plan.placement == {
        "llama-4-scout-17b-16e-instruct": [0, 1, 2, 3],
        "mixtral-8x7b-instruct-v0.1": [4, 5],
        "phi-4": [6],
        "qwen3-8b": [6],
        "gemma-3n-e4b-it": [7],
    }
    qwen = plan.needs["qwen3-8b"]
    assert qwen.weights == int(8.19e9 * 2) and qwen.kv_cache == 32_768 * 147_456
    # the shared GPU's 0.9 split in proportion to the two engines' needs; the others keep 0.9
    phi, qwen_total = plan.needs["phi-4"].total + 2 * GIB, qwen.total + 2 * GIB
    assert plan.shares["qwen3-8b"] == pytest.approx(0.9 * qwen_total / (phi + qwen_total))
    assert plan.shares["phi-4"] + plan.shares["qwen3-8b"] == pytest.approx(0.9)
    assert plan.shares["gemma-3n-e4b-it"] == 0.9
    assert plan.describe() == (
        "debate udpo/gsm8k/mad_n5 needs 8 × 80 GB h800 GPUs (llama-4-scout-17b-16e-instruct 4, "
        "mixtral-8x7b-instruct-v0.1 2, gemma-3n-e4b-it 1, phi-4 + qwen3-8b 1); h800 nodes have 8: ok"
    )
    # N = 3 (Qwen3, Phi-4, Mixtral) needs 3; a zero-shot job of Scout alone its 4
    assert gp.experiment_job_plan(_udpo(), "debate", {"dataset": "gsm8k", "protocol": "mad_n3"}, H800).gpus == 3
    assert gp.experiment_job_plan(_udpo(), "zero_shot", {"dataset": "gsm8k", "agent": "llama4"}, H800).gpus == 4


def test_two_8b_models_share_one_gpu_with_its_memory_split():
    eight_b = dict(weights=16 * GIB, kv_cache=4 * GIB)
    plan = gp.plan_job("debate pair", [gp.ModelNeed("a", **eight_b), gp.ModelNeed("b", **eight_b)], H800)
    assert plan.gpus == 1 and plan.placement == {"a": [0], "b": [0]}
    assert plan.shares == {"a": pytest.approx(0.45), "b": pytest.approx(0.45)}
    # an agent that split the GPU by hand keeps its share; the other gets what is left of 0.9
    plan = gp.plan_job("debate pair", [gp.ModelNeed("a", **eight_b, reserved=0.3), gp.ModelNeed("b", **eight_b)], H800)
    assert plan.gpus == 1 and plan.shares == {"a": 0.3, "b": pytest.approx(0.6)}
    # four of them: 3 × 22 GiB fill 66 of the 72 GiB usable, so the fourth opens a second GPU
    four = [gp.ModelNeed(n, **eight_b) for n in "abcd"]
    assert gp.plan_job("four", four, H800).placement == {"a": [0], "b": [0], "c": [0], "d": [1]}


def test_a_model_that_fits_nowhere_is_an_error_naming_the_fix():
    scout = gp.ModelNeed("scout", weights=int(202.3 * GIB), kv_cache=6 * GIB, tensor_parallel=2)
    with pytest.raises(
        gp.GpuPlanError,
        match=r"model scout needs 106\.1 GiB per GPU at tensor_parallel_size 2.*"
        r"the 72\.0 GiB usable on one GPU; set its tensor_parallel_size to 4",
    ):
        gp.plan_job("debate x", [scout], H800)
    # a share set by hand that the model does not fit in
    with pytest.raises(gp.GpuPlanError, match=r"the 16\.0 GiB its gpu_memory_utilization 0\.2 gives"):
        gp.plan_job("debate x", [gp.ModelNeed("m", weights=20 * GIB, reserved=0.2)], H800)


def test_a_plan_larger_than_a_node_is_an_error_naming_job_models_and_node():
    small_node = gp.GpuType("a100", 80 * GIB, 4)
    with pytest.raises(gp.GpuPlanError) as error:
        gp.experiment_job_plan(_udpo(), "debate", {"dataset": "gsm8k", "protocol": "mad_n5"}, small_node)
    assert str(error.value) == (
        "debate udpo/gsm8k/mad_n5 needs 8 × 80 GB a100 GPUs (llama-4-scout-17b-16e-instruct 4, "
        "mixtral-8x7b-instruct-v0.1 2, gemma-3n-e4b-it 1, phi-4 + qwen3-8b 1); a100 nodes have 4: does not fit"
    )


def test_training_jobs_place_their_bases_with_the_same_packing():
    exp = _udpo()
    # parallelism: model over the run's 8 GPUs: weights at most 70 % of each (56 GiB)
    plan = gp.experiment_job_plan(exp, "train_agents", {"run": "udpo"}, H800)
    assert plan.gpus == exp.training_runs["udpo"]["gpus"] == 8
    scout = exp.model_dir("llama-4-scout-17b-16e-instruct").rsplit("/", 1)[1]  # placed by base folder
    assert plan.placement[scout] == [0, 1, 2, 3]
    # the same bases on 80 GB GPUs of a node with 6: the job cannot hold them
    with pytest.raises(gp.GpuPlanError, match="do not fit on 8 GPU"):
        gp.experiment_job_plan(exp, "train_agents", {"run": "udpo"}, gp.GpuType("a40", 48 * GIB, 8))


def test_a_prepared_folder_is_sized_from_its_files_and_config(tmp_path):
    config = {
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "hidden_size": 64,
        "max_position_embeddings": 512,
        "torch_dtype": "float32",
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 4000)
    size = gp.model_size("bundled:unknown", "float32", tmp_path)
    assert (size.weights, size.kv_per_token, size.context) == (4000, 2 * 2 * 2 * 16 * 4, 512)
    # prepared in bfloat16 from float32 files: half the bytes
    assert gp.model_size("bundled:unknown", "bfloat16", tmp_path).weights == 2000
    with pytest.raises(gp.GpuPlanError, match="not prepared yet"):
        gp.model_size("bundled:unknown", "float32", tmp_path / "missing")


def test_an_unknown_gpu_type_is_a_config_error_naming_the_key():
    config = {"gpus": {"types": {"h800": {"memory_gib": 80, "per_node": 8}}, "default_type": "h800"}}
    assert gp.job_gpu_type(config, None).name == "h800"
    with pytest.raises(gp.GpuPlanError, match=r"'l40s'.*gpus\.types"):
        gp.job_gpu_type(config, "l40s")


def _folder(path, weights_bytes):
    path.mkdir()
    config = {
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "hidden_size": 512,
        "max_position_embeddings": 1024,
        "torch_dtype": "bfloat16",
    }
    (path / "config.json").write_text(json.dumps(config))
    (path / "model.safetensors").write_bytes(b"\0" * weights_bytes)
    return str(path)


def test_inside_a_job_each_engine_gets_gpus_of_its_own_or_a_share(tmp_path):
    """The job re-plans on the GPUs it got (CUDA names from the allocation), with the DAG's packing."""
    a, b = _folder(tmp_path / "a", 3000), _folder(tmp_path / "b", 2000)
    engines = {"a": (a, {"max_model_len": 512}, "vllm"), "b": (b, {}, "vllm")}
    # KV per token 2 * 4 * 8 * 64 * 2 = 8 KiB: a holds 3000 B + 512 × 8 KiB + 2 GiB overhead on a GPU
    need_a = 3000 + 512 * 8192 + 2 * GIB
    need_b = 2000 + 1024 * 8192 + 2 * GIB
    # GPUs of 4 GiB (3.6 usable) cannot hold both: each engine on its own GPU, the job's 0.9 each,
    # the larger (b: its whole 1,024-token context of KV cache) first
    small = gp.engine_slices(engines, gpu_memory=4 * GIB, gpus=["3", "5"])
    assert small == {
        "b": {"devices": ["3"], "gpu_memory_utilization": 0.9},
        "a": {"devices": ["5"], "gpu_memory_utilization": 0.9},
    }
    # GPUs of 8 GiB hold both: they share the first, 0.9 split by need
    big = gp.engine_slices(engines, gpu_memory=8 * GIB, gpus=["3", "5"])
    assert big["a"]["devices"] == big["b"]["devices"] == ["3"]
    assert big["a"]["gpu_memory_utilization"] == pytest.approx(0.9 * need_a / (need_a + need_b))
    # a transformers model gets its device, no vLLM share; one model alone, or no GPU: nothing changes
    mixed = gp.engine_slices({"a": (a, {}, "vllm"), "b": (b, {}, "transformers")}, gpu_memory=4 * GIB, gpus=["0", "1"])
    assert mixed == {"a": {"devices": ["0"], "gpu_memory_utilization": 0.9}, "b": {"devices": ["1"]}}
    assert gp.engine_slices({"a": engines["a"]}, gpu_memory=4 * GIB, gpus=["0"]) == {}
    assert gp.engine_slices(engines, gpu_memory=4 * GIB, gpus=[]) == {}
    # a job that got fewer GPUs than its models need says so
    with pytest.raises(gp.GpuPlanError, match=r"the job got 1 GPU\(s\) \(7\)"):
        gp.engine_slices(engines, gpu_memory=4 * GIB, gpus=["7"])


def test_full_fine_tuning_sizes_every_agent_s_weights_gradients_and_adam_states():
    """UMAD's two agents fully fine-tuned (the paper's setting): Qwen2.5-3B, P = 3.09e9 parameters, and
    Qwen3-4B, 4.02e9. In bfloat16 each holds its weights, gradients of the same size and AdamW's two
    float32 moments: 12 bytes a parameter, 34.5 GiB and 44.9 GiB. Under DeepSpeed ZeRO-3 over the 8
    GPUs, the gradients, float32 master weights and moments (2 + 4 + 8 bytes) are split 8 ways and
    the weights gathered whole for the rollouts: 2P + 14P / 8 per GPU, 10.8 + 14.0 GiB. As shipped,
    under FSDP2, which trains the float32 masters and so has float32 gradients: 2P + 16P / 8.
    Without DeepSpeed every process would hold both whole, 79.4 GiB, over the 56 GiB (70 % of 80)
    a GPU gives them: refused. With model parallelism each agent takes GPUs of its own; in float32
    (16 bytes a parameter) 46.0 GiB on one GPU and 59.9 GiB over two."""
    assert gp.training_state_bytes(int(3.09e9 * 2), "bfloat16") == int(3.09e9 * 12)
    assert gp.training_state_bytes(int(3.09e9 * 4), "float32") == int(3.09e9 * 16)
    assert gp.training_state_bytes(int(3.09e9 * 2), "bfloat16", 3, 8) == int(3.09e9 * 2 + 3.09e9 * 14 / 8)
    assert gp.training_state_bytes(int(3.09e9 * 2), "bfloat16", 1, 8) == int(3.09e9 * 4 + 3.09e9 * 12 / 8)
    assert gp.accelerate_zero_stage("config/accelerate/zero3_8gpu.yaml") == 3
    assert gp.accelerate_zero_stage("config/accelerate/zero1_8gpu.yaml") == 1
    assert gp.accelerate_zero_stage("config/accelerate/ddp_8gpu.yaml") is None
    # FSDP2 splits the weights, gradients and Adam states, as ZeRO-3 does, its gradients in float32
    assert gp.accelerate_zero_stage("config/accelerate/fsdp2_8gpu.yaml") == 3
    assert gp.accelerate_distributed_type("config/accelerate/fsdp2_8gpu.yaml") == "FSDP"
    fsdp = gp.training_state_bytes(int(3.09e9 * 2), "bfloat16", 3, 8, float32_gradients=True)
    assert fsdp == int(3.09e9 * 2 + 3.09e9 * 16 / 8)
    exp = load_experiment(REPO_ROOT / "config/experiments/umad.yaml")
    run = exp.training_runs["umad"]
    for config, sharded in (("fsdp2", 16), ("zero3", 14)):
        run["accelerate_config"] = f"config/accelerate/{config}_8gpu.yaml"
        plan = gp.experiment_job_plan(exp, "train_agents", {"run": "umad"}, H800)
        assert set(plan.needs) == {"qwen25_3b", "qwen3_4b"}  # one per agent, not per base
        for agent, parameters in (("qwen25_3b", 3.09e9), ("qwen3_4b", 4.02e9)):
            assert plan.needs[agent].weights == pytest.approx(parameters * (2 + sharded / 8), rel=1e-6)
        assert plan.gpus == 8 and all(g == list(range(8)) for g in plan.placement.values())
    sdrl = load_experiment(REPO_ROOT / "config/experiments/sdrl.yaml")
    sdrl.training_runs["dapo"]["gpus"] = 1  # one process under ZeRO-2 still keeps float32 masters (16 bytes, not 12)
    (one,) = gp.experiment_job_plan(sdrl, "train", {"run": "dapo"}, H800).needs.values()
    sdrl.training_runs["dapo"].pop("accelerate_config")
    (plain,) = gp.experiment_job_plan(sdrl, "train", {"run": "dapo"}, H800).needs.values()
    assert one.weights == pytest.approx(plain.weights * 16 / 12, rel=1e-6)
    run.pop("accelerate_config")
    with pytest.raises(gp.GpuPlanError, match="every process holds every model"):
        gp.experiment_job_plan(exp, "train_agents", {"run": "umad"}, H800)
    run.update(parallelism="model", dtype="float32")
    plan = gp.experiment_job_plan(exp, "train_agents", {"run": "umad"}, H800)
    assert plan.needs["qwen3_4b"].weights == pytest.approx(4.02e9 * 16, rel=1e-6)
    assert sorted(len(g) for g in plan.placement.values()) == [1, 2]
    assert not set(plan.placement["qwen25_3b"]) & set(plan.placement["qwen3_4b"])
