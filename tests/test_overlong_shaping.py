"""`overlong_shaping`: DAPO's soft overlong punishment added to the multi-agent methods' rewards, at
the granularity of each method's reward (UMAD/IPPO and MAPPO/RMAAC: each turn; UDPO: each seat's
trajectory, the mean over its turns). One step with and one without it on the same debates."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import toy_settings
from toy_questions import alternating_gold, toy_rows

from debatelab.training.core.rewards import overlong_penalty

pytestmark = pytest.mark.slow

MAX_TOKENS, BUFFER = 10, 6  # replies past 4 tokens lose reward: the character model writes 1-10


def _trainer(method: str, char_model_dir, shaping: bool):
    import torch

    from debatelab.data.schema import frame_from_rows
    from debatelab.training.core.agents import AgentPolicies
    from debatelab.training.methods.udpo import AgentCoefficients

    settings = toy_settings(
        method=method,
        steps=1,
        lora={"r": 4, "alpha": 8},
        dtype="float32",
        max_tokens=MAX_TOKENS,
        overlong_shaping=shaping,
        **({"overlong_buffer": BUFFER} if shaping else {}),  # without shaping a run reads no overlong key
        learning_rate=1e-2,
        warmup_steps=0,
        mini_batch_size=64,
        micro_batch_size=16,
        show_progress=False,
        **{
            "udpo": {"udpo": {"questions_per_step": 2}},
            "umad": {"umad": {"threads": 3, "turns": 2, "questions_per_step": 2}},
            "rmaac": {"mappo": {"rounds": 1, "questions_per_step": 2}},
            "mappo": {"mappo": {"rounds": 1, "questions_per_step": 2}},
        }[method],
    )
    torch.manual_seed(0)
    policies = AgentPolicies({"alice": char_model_dir, "bob": char_model_dir}, settings, device="cpu")
    rows = toy_rows(4, alternating_gold)
    common = dict(run=method, participants=["alice", "bob"])
    if method == "umad":
        from debatelab.training.methods.umad import UmadTrainer

        return UmadTrainer(frame_from_rows(rows), policies, settings, **common)
    if method == "mappo":
        from debatelab.training.methods.mappo import MappoTrainer

        return MappoTrainer(frame_from_rows(rows), policies, settings, **common)
    from debatelab.training.methods.udpo import UdpoTrainer

    coefficients = {
        "alice": AgentCoefficients(0.3, 0.3, 0.3, 1.0, 0.01),
        "bob": AgentCoefficients(0.5, 0.2, 0.3, 0.8, 0.02),
    }
    return UdpoTrainer(
        frame_from_rows(rows), policies, settings, rounds=1, coefficients=coefficients, questions_per_step=2, **common
    )


def _rollouts_of_one_step(trainer) -> list:
    """Every rollout the step updates on, with the reward the method gave it."""
    seen, update = [], trainer.update_policy

    def recording(sequences, *args, **kwargs):
        seen.extend(sequences)
        return update(sequences, *args, **kwargs)

    trainer.update_policy = recording
    trainer.train()
    trainer.policy.close()
    return seen


@pytest.mark.parametrize("method", ["umad", "mappo", "udpo"])
def test_overlong_shaping_adds_the_punishment_of_each_reply_to_the_methods_reward(method, char_model_dir):
    plain = _rollouts_of_one_step(_trainer(method, char_model_dir, shaping=False))
    shaped = _rollouts_of_one_step(_trainer(method, char_model_dir, shaping=True))
    assert [(r.group, r.sample, r.turn, r.text) for r in plain] == [(r.group, r.sample, r.turn, r.text) for r in shaped]
    punishment = np.array([overlong_penalty(r.length, MAX_TOKENS, BUFFER) for r in plain])
    assert (punishment < 0).any() and np.ptp(punishment) > 0  # replies of different lengths are punished
    added = np.array([s.reward - p.reward for p, s in zip(plain, shaped)])
    if method == "udpo":  # the seat's trajectory reward gains its turns' mean punishment
        seats: dict = {}
        for k, r in enumerate(plain):
            seats.setdefault((r.group, r.sample), []).append(k)
        expected = np.zeros_like(punishment)
        for members in seats.values():
            expected[members] = punishment[members].mean()
        assert any(len(m) > 1 for m in seats.values())
    else:
        expected = punishment
    np.testing.assert_allclose(added, expected, atol=1e-6)
    moved = np.array([s.advantage - p.advantage for p, s in zip(plain, shaped)])
    if method == "udpo":  # Â = r − the batch's mean for that seat (§5.3): a punishment alike in every debate cancels
        seat_means = {
            seat: np.mean([expected[members[0]] for (g, sample), members in seats.items() if sample == seat])
            for seat in {sample for _, sample in seats}
        }
        np.testing.assert_allclose(moved, expected - np.array([seat_means[r.sample] for r in plain]), atol=1e-6)
    else:
        assert np.abs(moved).max() > 1e-3  # the punishment reaches the update
