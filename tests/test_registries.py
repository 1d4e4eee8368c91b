"""One registry per extension point, and the schema's enums equal to it.

config/schema.yaml is YAML and can't import the registries, so it repeats their names; this test
is what keeps the copies equal (same names, same order). Adding a debate protocol kind, a
confidence estimator, a paper or a training method is its module plus its registry entry, and this
test names the schema enums to extend."""

from __future__ import annotations

import pytest
import yaml

from debatelab import prompts
from debatelab.confidence.calibrators import CALIBRATORS
from debatelab.confidence.fusion import SEARCH_SPACES
from debatelab.config import SCHEMA_PATH
from debatelab.debate import protocols
from debatelab.estimators import CONFIDENCE_ESTIMATORS, ESTIMATORS, SEQPROB_TARGETS
from debatelab.evaluation.paper_numbers import PAPER_NUMBERS_DIR
from debatelab.evaluation.papers import PAPER_TITLES, PAPERS
from debatelab.llm import BACKENDS
from debatelab.training.methods import METHODS, multi_agent_methods

SCHEMA = yaml.safe_load(SCHEMA_PATH.read_text())
PROTOCOL = ("definitions", "protocol", "properties")
TOP = ("properties",)

#: registry -> (its names, the schema paths of the enums that list them)
REGISTRIES = {
    "debate.protocols.PROTOCOLS (kinds)": (list(protocols.PROTOCOLS), [PROTOCOL + ("kind", "enum")]),
    "prompts.TEMPLATES (debate templates)": (list(prompts.TEMPLATES), [PROTOCOL + ("template", "enum")]),
    "estimators.ESTIMATORS (elicited)": (
        list(ESTIMATORS),
        [
            PROTOCOL + ("confidence", "items", "enum"),
            TOP + ("zero_shot", "properties", "estimators", "items", "enum"),
        ],
    ),
    "estimators.CONFIDENCE_ESTIMATORS (elicited + token-level)": (
        list(CONFIDENCE_ESTIMATORS),
        [TOP + ("calibration", "properties", "estimators", "items", "enum")],
    ),
    "estimators.SEQPROB_TARGETS": (
        list(SEQPROB_TARGETS),
        [TOP + ("zero_shot", "properties", "seqprob_target", "enum")],
    ),
    "llm.BACKENDS": (
        list(BACKENDS),
        [("definitions", "agent", "properties", "backend", "enum"), TOP + ("attack", "properties", "backend", "enum")],
    ),
    "evaluation.papers.PAPERS": (
        list(PAPERS),
        [
            ("definitions", "model", "properties", "paper_backbone", "propertyNames", "enum"),
            TOP + ("evaluation", "properties", "papers", "items", "enum"),
        ],
    ),
    "confidence.calibrators.CALIBRATORS": (
        list(CALIBRATORS),
        [
            TOP + ("calibration", "properties", "calibrators", "items", "enum"),
            TOP + ("calibration", "properties", "report_calibrator", "enum"),
        ],
    ),
    "confidence.fusion.SEARCH_SPACES (searched protocols)": (
        list(SEARCH_SPACES),
        [
            TOP + ("protocol_search", "properties", "protocols", "items", "enum"),
        ],
    ),
    "training.methods.METHODS": (
        list(METHODS),
        [("definitions", "training_run", "properties", "method", "enum")],
    ),
    "training.methods.METHODS (multi-agent)": (
        list(multi_agent_methods()),
        [
            ("definitions", "training_run", "if", "properties", "method", "enum"),
        ],
    ),
}


def _at(path: tuple[str, ...]):
    node = SCHEMA
    for key in path:
        node = node[key]
    return node


@pytest.mark.parametrize("registry", REGISTRIES)
def test_schema_enums_equal_the_registry(registry):
    names, paths = REGISTRIES[registry]
    for path in paths:
        assert _at(path) == names, f"config/schema.yaml {'.'.join(path)} differs from {registry} {names}"


def test_every_protocol_kind_is_a_row_of_the_protocols_table():
    for kind, cls in protocols.PROTOCOLS.items():
        assert cls.kind == kind
        assert f"\n{kind} " in protocols.__doc__, f"debate/protocols.py's table of kinds has no row {kind!r}"


def test_every_paper_has_a_title_a_builder_and_published_numbers():
    assert list(PAPER_TITLES) == list(PAPERS)
    for name, paper in PAPERS.items():
        assert paper.evaluate.__module__ == f"debatelab.evaluation.papers.{name}", name
        assert (PAPER_NUMBERS_DIR / f"{name}.yaml").is_file(), name


def test_every_training_method_has_its_trainer_its_settings_block_and_protocol_kinds():
    from debatelab.training import TrainSettings

    run = SCHEMA["definitions"]["training_run"]["properties"]
    from debatelab.training.core.trainer import BaseTrainer

    for method in METHODS.values():
        assert issubclass(method.trainer, BaseTrainer), method.name
        assert method.trainer.__module__.startswith("debatelab.training.methods."), method.name
        if method.block is not None:  # a block of the schema and a field of TrainSettings, built by its class
            assert method.block in run, method.name
            assert isinstance(getattr(TrainSettings(method=method.name), method.block), method.settings)
        assert set(method.protocol_kinds) <= set(protocols.PROTOCOLS), method.name
        assert bool(method.protocol_kinds) == method.multi_agent, method.name
