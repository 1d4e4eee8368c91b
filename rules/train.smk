rule train:
    """RL fine-tuning of one run's policy, DAPO or SDRL (GPU-heavy; several GPUs: accelerate launch)."""
    input:
        dataset=lambda wc: EXP.dataset_path(TRAINING_RUNS[wc.run]["dataset"]),
        model=lambda wc: EXP.agent_model_dir(TRAINING_RUNS[wc.run]["policy"]),
    output:
        model=directory(f"{RESULTS}/train/{{run}}/model"),
        metrics=f"{RESULTS}/train/{{run}}/metrics.parquet",
        curves=report(
            f"{RESULTS}/train/{{run}}/curves.png",
            category="Training",
            subcategory="{run}",
            caption="../report/training_curves.rst",
        ),
        settings=f"{RESULTS}/train/{{run}}/settings.json",
    params:
        settings=lambda wc: EXP.train_settings(wc.run),
        policy=lambda wc: EXP.agent_settings(TRAINING_RUNS[wc.run]["policy"]),
        policy_name=lambda wc: TRAINING_RUNS[wc.run]["policy"],
        limit=lambda wc: DATASETS[TRAINING_RUNS[wc.run]["dataset"]]["limit"],
        accelerate_config=lambda wc: TRAINING_RUNS[wc.run]["accelerate_config"],
        # Beside the outputs, not one of them: a failed job's rerun resumes from it.
        checkpoint_dir=lambda wc: f"{RESULTS}/train/{wc.run}/checkpoint",
    log:
        f"{LOGS}/train/{{run}}.log",
    benchmark:
        f"{BENCH}/train/{{run}}.tsv"
    threads: 2
    resources:
        gpu=lambda wc: TRAINING_RUNS[wc.run]["gpus"],
        mem_mb=32000,
        runtime=1440,
    script:
        "../workflow_scripts/train/train.py"
