"""What the micro model is built from: one frozen settings object, written beside the weights.

`MicroRecipe` holds every choice of `testbed.build` (the questions, the teacher, the corpus's mix, the
tokenizer, the network's shape, the supervised training); `recipe.json` in the model folder is its
`to_dict()`, and `MICRO_RECIPE` is the recipe the shipped model was built with (a test fails when
they differ, so a change here means a rebuild: `snakemake --forcerun micro_model`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .teacher import TeacherSettings


@dataclass(frozen=True)
class MicroRecipe:
    name: str = "micro-chain"
    seed: int = 0
    benchmark: str = "chain_sum"  # the task (`data.offline.CHAIN_SUM_SETTINGS`); train split only
    train_questions: int = 20000  # examples the corpus is rendered from, one train-split question each
    # distinct train-split questions they cycle through (None: as many as train_questions); each
    # rendering draws the teacher afresh, so a repeated question is taught a spread of replies
    question_pool: int | None = 2000  # about all of chain_sum's train split
    # the corpus's mix (`testbed.corpus.build_corpus`): first answers, debate turns, SDRL's second turn,
    # 0-10 self-reports
    shares: dict = field(
        default_factory=lambda: {"zero_shot": 0.5, "debate": 0.45, "self_debate": 0.025, "confidence": 0.025}
    )
    # a hasty reply misreads an operator 70 % of the time, a careful one never: the choice a trainer
    # can be seen to learn on unseen questions (docs/micro.md)
    teacher: TeacherSettings = field(
        default_factory=lambda: TeacherSettings(hasty_slip=0.1, careful_slip=0.02, careful_share=0.3, hasty_misread=0.7)
    )
    vocab_size: int = 512  # the byte-level BPE's tokens, special tokens included
    tokenizer_examples: int = 3000  # corpus examples the tokenizer is fitted on
    # LlamaForCausalLM's shape: heads of 64 (vLLM's CPU attention takes no smaller), embeddings tied
    hidden_size: int = 128
    intermediate_size: int = 512
    num_hidden_layers: int = 4
    num_attention_heads: int = 2
    # the supervised training (TRL's SFTTrainer; loss on the assistant turns only)
    max_length: int = 1024  # tokens an example is cut to (the corpus's longest is under it)
    steps: int = 3000
    batch_size: int = 16
    learning_rate: float = 1e-3
    warmup_steps: int = 50
    lr_schedule: str = "cosine"

    def __post_init__(self):
        if isinstance(self.teacher, dict):
            object.__setattr__(self, "teacher", TeacherSettings(**self.teacher))
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("micro recipe: hidden_size must be a multiple of num_attention_heads")
        for key in ("train_questions", "vocab_size", "steps", "batch_size", "max_length"):
            if getattr(self, key) < 1:
                raise ValueError(f"micro recipe: {key} must be >= 1, got {getattr(self, key)}")
        if self.question_pool is not None and self.question_pool < 1:
            raise ValueError(f"micro recipe: question_pool must be >= 1 or None, got {self.question_pool}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> MicroRecipe:
        return cls(**values)


#: The recipe of the shipped `bundled:micro-chain`.
MICRO_RECIPE = MicroRecipe()
