"""Settings per method: a core (`TrainSettings`) and one block of the run's own method, each validating
itself; a key the run's method doesn't read is an error naming the key and the method, at the dry run."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import yaml

from debatelab.config import ConfigError, Experiment, validate_config
from debatelab.training.methods import METHODS
from debatelab.training.settings import MULTI_AGENT_KEYS, TrainSettings

REPO = Path(__file__).resolve().parents[1]
SCHEMA = yaml.safe_load((REPO / "config/schema.yaml").read_text())
RUN = SCHEMA["definitions"]["training_run"]["properties"]
TINY = yaml.safe_load((REPO / "tests/configs/tiny.yaml").read_text())


def _experiment(edit) -> Experiment:
    config = copy.deepcopy(TINY)
    edit(config["training"]["runs"])
    return Experiment(validate_config(config))


@pytest.mark.parametrize("method", list(METHODS))
def test_each_method_builds_its_own_block_and_no_other(method):
    settings = TrainSettings(method=method)
    own = METHODS[method].block
    assert isinstance(settings.own, METHODS[method].settings) and settings.own is getattr(settings, own)
    others = {m.block for m in METHODS.values()} - {own}
    assert all(getattr(settings, block) is None for block in others)


@pytest.mark.parametrize("method", list(METHODS))
def test_each_blocks_schema_lists_exactly_its_class_fields(method):
    """The schema refuses a key its block's class lacks (additionalProperties: false) and offers every
    field: the two lists are the same, so no key is accepted and then ignored."""
    spec = METHODS[method]
    block = RUN[spec.block]
    assert block.get("additionalProperties") is False and "default" not in block, spec.block
    assert sorted(block["properties"]) == sorted(f.name for f in dataclasses.fields(spec.settings)), spec.block


def test_another_methods_block_is_refused_naming_it_and_the_method():
    with pytest.raises(
        ValueError, match=r"training: udpo is a block method 'mappo' does not read \(its block is 'mappo'\)"
    ):
        TrainSettings(method="mappo", udpo={})
    with pytest.raises(ValueError, match=r"training: dapo is a block method 'sdrl' does not read"):
        TrainSettings(method="sdrl", dapo={"prompts_per_step": 4})


def test_a_key_its_block_lacks_is_refused_with_the_blocks_keys():
    with pytest.raises(ValueError, match=r"training: sdrl\.pair_mod is no setting of sdrl \(its keys: \[.*'pair_mode'"):
        TrainSettings(method="sdrl", sdrl={"pair_mod": "freq"})
    with pytest.raises(ValueError, match=r"mappo\.eta is no setting of mappo, the block of 'rmaac' \(its keys"):
        TrainSettings.from_config({"method": "rmaac", "mappo": {"eta": 0.1}})
    # UDPO weighs the KL by each seat's eta: it has no kl_coef to set (it was accepted and ignored before)
    with pytest.raises(ValueError, match=r"udpo\.kl_coef is no setting of udpo"):
        TrainSettings(method="udpo", udpo={"kl_coef": 0.1})


@pytest.mark.parametrize("key", MULTI_AGENT_KEYS)
def test_multi_agent_keys_on_a_single_policy_run_are_refused(key):
    value = {"protocol": "trained", "overlong_shaping": False, "parallelism": "data"}[key]
    with pytest.raises(ValueError, match=rf"training: {key} is read by the multi-agent methods only .* not by 'dapo'"):
        TrainSettings.from_config({"method": "dapo", key: value})  # even at its default value: it was written


@pytest.mark.parametrize("key, value", [("overlong_buffer", 0), ("overlong_penalty", 1.0)])
def test_overlong_keys_on_a_multi_agent_run_without_shaping_are_refused(key, value):
    """A multi-agent run has no overlong punishment unless `overlong_shaping` is set: its overlong keys
    are refused even at a value that changes nothing; with shaping they are read, and a single-policy
    run always reads them (2048 when absent)."""
    with pytest.raises(ValueError, match=rf"training: {key} is read by 'umad' only with overlong_shaping: true"):
        TrainSettings.from_config({"method": "umad", "max_tokens": 8, key: value})
    with pytest.raises(ValueError, match=r"training: overlong_buffer is read by 'mappo' only with overlong_shaping"):
        TrainSettings(method="mappo", max_tokens=8, overlong_buffer=4)
    unshaped = TrainSettings.from_config({"method": "udpo", "max_tokens": 8})
    assert unshaped.overlong_buffer == 0 and TrainSettings(**unshaped.to_dict()) == unshaped  # a job spec's round trip
    shaped = {"method": "umad", "max_tokens": 8, "overlong_shaping": True, "overlong_buffer": 4}
    assert getattr(TrainSettings.from_config({**shaped, key: value}), key) == value
    assert TrainSettings.from_config({"method": "dapo", "max_tokens": 4096}).overlong_buffer == 2048
    with pytest.raises(ValueError, match=r"overlong_buffer must be in \[0, max_tokens\), got 2048"):
        TrainSettings.from_config({"method": "sdrl", "max_tokens": 8})


@pytest.mark.parametrize("method", ["sdrl", "umad"])
def test_a_lora_block_on_a_run_that_trains_every_weight_is_refused(method):
    """`finetuning: full` has no adapter: a `lora` block written beside it (even the defaults) is refused,
    in the config and off its defaults in the constructor; the defaults it holds round-trip a job spec."""
    spec = {"method": method, "max_tokens": 4096, "finetuning": "full"}
    with pytest.raises(ValueError, match=r"training: lora is read only with finetuning: lora .* finetuning: full"):
        TrainSettings.from_config({**spec, "lora": {}})
    with pytest.raises(ValueError, match=r"training: lora is read only with finetuning: lora"):
        TrainSettings(**spec, lora={"r": 4})
    full = TrainSettings.from_config(spec)
    assert full.lora == TrainSettings().lora and TrainSettings(**full.to_dict()) == full
    assert TrainSettings.from_config({**spec, "finetuning": "lora", "lora": {"r": 4}}).lora.r == 4


@pytest.mark.parametrize("method", ["dapo", "sdrl", "umad", "mappo", "rmaac"])
def test_a_trajectory_ratio_is_udpos_alone(method):
    """One ratio over a rollout group is a trajectory's only in UDPO (an agent's turns of one debate);
    elsewhere a group is G replies or threads (DAPO, SDRL, UMAD) or one turn (MAPPO), so it is refused."""
    from debatelab.training.methods import METHODS

    with pytest.raises(ValueError, match=rf"training: ratio_level 'trajectory' is not read by '{method}'"):
        TrainSettings.from_config({"method": method, "max_tokens": 4096, "ratio_level": "trajectory"})
    assert TrainSettings.from_config({"method": method, "max_tokens": 4096, "ratio_level": "sequence"})
    assert TrainSettings.from_config({"method": "udpo", "ratio_level": "trajectory"}).ratio_level == "trajectory"
    assert [m for m, spec in METHODS.items() if "trajectory" in spec.ratio_levels] == ["udpo"]


@pytest.mark.parametrize(
    "method, without_kl, with_kl, weight",
    [
        ("dapo", {}, {"dapo": {"kl_coef": 0.01}}, "dapo.kl_coef"),
        ("sdrl", {}, {"sdrl": {"kl_coef": 0.01}}, "sdrl.kl_coef"),
        ("umad", {}, {"umad": {"kl_coef": 0.001}}, "umad.kl_coef"),  # in the reward (kl_mode reward) too
        ("rmaac", {}, {"mappo": {"kl_coef": 0.1}}, "mappo.kl_coef"),
        ("udpo", {"udpo": {"eta_base": 0.0}}, {}, "udpo.eta_base"),  # each seat's eta is a multiple of it
    ],
)
def test_a_kl_estimator_without_a_kl_weight_is_refused(method, without_kl, with_kl, weight):
    """A run whose KL weight is 0 computes no KL: a `kl_estimator` off its default is refused, naming the
    weight that would make it read; the default, which the schema fills into every run, passes."""
    spec = {"method": method, "max_tokens": 4096}
    with pytest.raises(
        ValueError,
        match=rf"training: kl_estimator is read by '{method}' only with a KL term \({weight} > 0; this run's is 0\)",
    ):
        TrainSettings.from_config({**spec, **without_kl, "kl_estimator": "k1"})
    assert TrainSettings.from_config({**spec, **with_kl, "kl_estimator": "k1"}).kl_estimator == "k1"
    assert TrainSettings.from_config({**spec, **without_kl, "kl_estimator": "k3"}).kl_estimator == "k3"


@pytest.mark.parametrize(
    "key, value",
    [
        ("vllm_gpu_memory_utilization", 0.5),
        ("vllm_max_model_len", 512),
        ("vllm_enforce_eager", True),
        ("vllm_sleep", True),
    ],
)
def test_the_vllm_engines_keys_with_rollouts_on_transformers_are_refused(key, value):
    spec = {"method": "umad", key: value}
    with pytest.raises(ValueError, match=rf"training: {key} is read by 'umad' only with rollouts on vLLM"):
        TrainSettings.from_config({**spec, "rollout_backend": "transformers"})
    for backend in ("auto", "vllm"):  # auto takes vLLM where a GPU and vLLM are there
        assert getattr(TrainSettings.from_config({**spec, "rollout_backend": backend}), key) == value


def test_shared_prompts_are_read_only_by_packed_updates():
    spec = {"method": "sdrl", "max_tokens": 4096, "shared_prompts": False}
    with pytest.raises(ValueError, match=r"training: shared_prompts is read by 'sdrl' only with packed_updates: true"):
        TrainSettings.from_config({**spec, "packed_updates": False})
    assert not TrainSettings.from_config(spec).shared_prompts
    assert not TrainSettings.from_config({**spec, "shared_prompts": True, "packed_updates": False}).packed_updates


RUNS = r"config: training\.runs\."


@pytest.mark.parametrize(
    "path, value, message",
    [
        (("rmaac", "udpo"), {"rounds": 1}, RUNS + r"rmaac\.udpo is a block method 'rmaac' does not read"),
        (("sdrl", "overlong_shaping"), True, RUNS + r"sdrl\.overlong_shaping is read by the multi-agent"),
        (("umad", "ratio_level"), "trajectory", RUNS + r"umad\.ratio_level 'trajectory' is not read by 'umad'"),
        (("umad", "overlong_buffer"), 0, RUNS + r"umad\.overlong_buffer is read by 'umad' only with"),
        (
            ("umad", "finetuning"),
            "full",
            RUNS + r"umad\.lora is read only with finetuning: lora",
        ),  # its lora block stays
        # DAPO's keys live in its block
        (
            ("sdrl", "prompts_per_step"),
            2,
            r"training\.runs\.sdrl: Additional properties are not allowed \('prompts_per_step'",
        ),
        (
            ("umad", "policy"),
            "alice",
            RUNS + r"umad\.policy is read by dapo, sdrl only; method 'umad' trains its participants",
        ),
        (
            ("sdrl", "participants"),
            ["alice", "bob"],
            RUNS + r"sdrl\.participants is read by udpo, umad, mappo, rmaac only; method 'sdrl' trains its policy",
        ),
        (
            ("sdrl", "heldout"),
            {"every": 2},
            RUNS + r"sdrl\.heldout\.every is read only with training\.runs\.sdrl\.heldout\.dataset",
        ),
        (("sdrl", "kl_estimator"), "k1", RUNS + r"sdrl\.kl_estimator is read by 'sdrl' only with a KL term"),
        (("sdrl", "sdrl", "rollouts_per_prompt"), 1, r"training\.runs\.sdrl\.sdrl\.rollouts_per_prompt"),
    ],
)
def test_the_dry_run_names_the_run_the_key_and_the_method(path, value, message):
    """`runs.<path>` set to `value` in the tiny config: the dry run's error names the run, the key and,
    where a method doesn't read it, the method."""

    def edit(runs):
        *parents, key = path
        for parent in parents:
            runs = runs[parent]
        runs[key] = value

    with pytest.raises(ConfigError, match=message):
        _experiment(edit)


def test_the_kl_weight_is_the_blocks_and_udpo_has_none():
    assert TrainSettings(method="dapo", dapo={"kl_coef": 0.01}).kl_weight == 0.01
    assert TrainSettings(method="umad", umad={"kl_coef": 0.001}).kl_weight == 0.001
    assert TrainSettings(method="rmaac", mappo={"kl_coef": 0.2}).kl_weight == 0.2
    assert TrainSettings(method="udpo").kl_weight == 0.0  # its trainer passes each seat's eta


def test_a_settings_dict_round_trips_through_the_job_spec():
    """`to_dict` is what travels to each training process (job.json) and into the resume fingerprint."""
    for method in METHODS:
        settings = TrainSettings(method=method, lora={"r": 4, "alpha": 8})
        assert TrainSettings(**settings.to_dict()) == settings
