"""Build the micro model from its recipe: corpus, tokenizer, a small Llama, supervised training.

`build_micro_model(out_dir, recipe)` renders the corpus (`testbed.corpus`) from the benchmark's train
split, fits the tokenizer (`micro.tokenizer`), trains a randomly initialised `LlamaForCausalLM` of
the recipe's shape on the assistant turns with TRL's `SFTTrainer`, and publishes one folder
atomically: the Hugging Face model and tokenizer, `recipe.json` (the recipe, each file's sha256,
the versions that built it, the training's loss and time) and `heldout.json` (the built model's
accuracy per format on validation questions, `testbed.evaluate`). The rule `micro_model` calls it;
the shipped model (`shipped.SHIPPED_DIR`) is its output.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from pathlib import Path

from ..micro.recipe import MICRO_RECIPE, MicroRecipe
from ..micro.shipped import HELDOUT_FILE, RECIPE_FILE, file_hashes

log = logging.getLogger(__name__)


def corpus_for(recipe: MicroRecipe) -> list[dict]:
    from ..data.registry import load_benchmark
    from ..micro.teacher import Teacher
    from .corpus import build_corpus

    pool = min(recipe.question_pool or recipe.train_questions, recipe.train_questions)
    frame = load_benchmark(recipe.benchmark, "train", source="offline", limit=pool, seed=recipe.seed)
    distinct = frame.to_dict("records")
    rows = [distinct[i % len(distinct)] for i in range(recipe.train_questions)]
    return build_corpus(rows, Teacher(recipe.teacher), recipe.seed, recipe.shares)


def build_micro_model(
    out_dir: str | Path, recipe: MicroRecipe = MICRO_RECIPE, *, heldout_questions: int = 200, threads: int | None = None
) -> dict:
    """Build the model of `recipe` into `out_dir` (replaced in one step); returns `recipe.json`'s content."""
    import datasets
    import torch
    import transformers
    import trl
    from trl import SFTConfig, SFTTrainer

    from ..micro.tokenizer import fit_tokenizer
    from ..models import publish_folder, random_llama
    from .corpus import conversation
    from .evaluate import format_accuracy

    if threads:
        torch.set_num_threads(threads)
    started = time.time()
    examples = corpus_for(recipe)
    tokenizer = fit_tokenizer(
        (m["content"] for e in examples[: recipe.tokenizer_examples] for m in conversation(e)), recipe.vocab_size
    )
    lengths = [len(tokenizer.apply_chat_template(conversation(e), tokenize=True)["input_ids"]) for e in examples]
    kept = [e for e, n in zip(examples, lengths) if n <= recipe.max_length]
    log.info(
        "micro corpus: %d examples (%d over %d tokens left out)",
        len(kept),
        len(examples) - len(kept),
        recipe.max_length,
    )
    model = random_llama(
        tokenizer,
        seed=recipe.seed,
        hidden_size=recipe.hidden_size,
        intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.num_hidden_layers,
        num_attention_heads=recipe.num_attention_heads,
        num_key_value_heads=recipe.num_attention_heads,
        tie_word_embeddings=True,
    )
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    dataset = datasets.Dataset.from_list([{"messages": conversation(e)} for e in kept])
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        args = SFTConfig(
            output_dir=str(staging / "trainer"),
            max_steps=recipe.steps,
            per_device_train_batch_size=recipe.batch_size,
            learning_rate=recipe.learning_rate,
            lr_scheduler_type=recipe.lr_schedule,
            warmup_steps=recipe.warmup_steps,
            weight_decay=0.0,
            max_length=recipe.max_length,
            assistant_only_loss=True,
            # batches of alike lengths: a CPU pass is padded to its longest example
            train_sampling_strategy="group_by_length",
            bf16=False,  # TRL's default bf16 autocast is several times slower on CPUs without bf16 units
            gradient_checkpointing=False,  # TRL's default; the activations of so small a model fit anywhere
            use_cpu=not torch.cuda.is_available(),
            seed=recipe.seed,
            data_seed=recipe.seed,
            logging_steps=max(recipe.steps // 40, 1),
            save_strategy="no",
            report_to="none",
            dataloader_num_workers=0,
        )
        trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
        result = trainer.train()
        model = trainer.model.to("cpu").float()
        built = staging / out_dir.name
        model.save_pretrained(built)
        tokenizer.save_pretrained(built)
        train_seconds = time.time() - started
        record = {
            "recipe": recipe.to_dict(),
            "files": file_hashes(built),
            "parameters": sum(p.numel() for p in model.parameters()),
            "corpus_examples": len(kept),
            "train_loss": round(float(result.training_loss), 4),
            "final_loss": round(float(trainer.state.log_history[-2].get("loss", float("nan"))), 4)
            if len(trainer.state.log_history) > 1
            else None,
            "build_seconds": round(train_seconds, 1),
            "versions": {
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "trl": trl.__version__,
                "datasets": datasets.__version__,
            },
        }
        (built / RECIPE_FILE).write_text(json.dumps(record, indent=2) + "\n")
        heldout = format_accuracy(built, questions=heldout_questions, seed=recipe.seed, recipe=recipe)
        (built / HELDOUT_FILE).write_text(json.dumps(heldout, indent=2) + "\n")
        publish_folder(built, out_dir)
        return record
    finally:
        shutil.rmtree(staging, ignore_errors=True)
