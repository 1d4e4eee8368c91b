rule train:
    """RL fine-tuning of one run's policy, DAPO or SDRL (GPU-heavy; several GPUs: accelerate launch)."""
    input:
        unpack(heldout_input),
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
    wildcard_constraints:
        run=_alternatives(set(TRAINING_RUNS) - set(EXP.multi_agent_runs())) or "(?!)",
    params:
        settings=lambda wc: EXP.train_settings(wc.run),
        policy=lambda wc: EXP.agent_settings(TRAINING_RUNS[wc.run]["policy"]),
        policy_name=lambda wc: TRAINING_RUNS[wc.run]["policy"],
        limit=lambda wc: DATASETS[TRAINING_RUNS[wc.run]["dataset"]]["limit"],
        accelerate_config=lambda wc: ACCELERATE_CONFIGS[wc.run],
        # Beside the outputs, not one of them: a failed job's rerun resumes from it.
        checkpoint_dir=lambda wc: f"{RESULTS}/train/{wc.run}/checkpoint",
    log:
        f"{LOGS}/train/{{run}}.log",
    benchmark:
        f"{BENCH}/train/{{run}}.tsv"
    threads: 2
    resources:
        gpu=planned_gpus("train"),
        nodes=planned_nodes("train"),
        tasks_per_gpu=planned_tasks_per_gpu("train"),
        tasks=planned_tasks("train"),
        mpi=planned_mpi("train"),
        mem_mb=32000,
        runtime=1440,
    conda:
        SOFTWARE_ENV
    script:
        "../workflow_scripts/train/train.py"


# -- UDPO and UMAD: every agent of a debate trained at once (Tang et al., arXiv:2602.07186 §4, App. A, Qiao et al., arXiv:2603.01221 §4.2, App. C.2, Algorithm 2) ---------
rule udpo_warmup:
    """App. A.2 step 1: the untrained agents debate the held-out warm-up questions (GPU)."""
    input:
        dataset=lambda wc: EXP.dataset_path(TRAINING_RUNS[wc.run]["dataset"]),
        models=lambda wc: list(multi_agent_job(wc.run)["bases"].values()),
    output:
        f"{RESULTS}/train/{{run}}/warmup.parquet",
    wildcard_constraints:
        run=_alternatives(EXP.runs_of("udpo")) or "(?!)",
    params:
        udpo=lambda wc: multi_agent_job(wc.run),
        settings=lambda wc: udpo_job_settings(EXP.train_settings(wc.run), "warmup"),
        limit=lambda wc: DATASETS[TRAINING_RUNS[wc.run]["dataset"]]["limit"],
    log:
        f"{LOGS}/train/{{run}}.warmup.log",
    benchmark:
        f"{BENCH}/train/{{run}}.warmup.tsv"
    threads: 2
    resources:
        # one GPU, or with model parallelism the run's GPUs: each base model on its own share
        gpu=planned_gpus("udpo_warmup"),
        mem_mb=32000,
        runtime=240,
    conda:
        SOFTWARE_ENV
    script:
        "../workflow_scripts/train/udpo_warmup.py"


rule udpo_coefficients:
    """App. A.2 steps 2-5: per-agent coefficients from the warm-up debates (CPU)."""
    input:
        warmup=f"{RESULTS}/train/{{run}}/warmup.parquet",
    output:
        f"{RESULTS}/train/{{run}}/coefficients.json",
    wildcard_constraints:
        run=_alternatives(EXP.runs_of("udpo")) or "(?!)",
    params:
        settings=lambda wc: udpo_job_settings(EXP.train_settings(wc.run), "coefficients"),
    log:
        f"{LOGS}/train/{{run}}.coefficients.log",
    conda:
        SOFTWARE_ENV
    script:
        "../workflow_scripts/train/udpo_coefficients.py"


rule train_agents:
    """UDPO or UMAD: every participant of the run's debate trained as its own LoRA adapter (GPU-heavy)."""
    input:
        unpack(lambda wc: {"coefficients": f"{RESULTS}/train/{wc.run}/coefficients.json"}
               if TRAINING_RUNS[wc.run]["method"] == "udpo" else {}),
        unpack(heldout_input),
        dataset=lambda wc: EXP.dataset_path(TRAINING_RUNS[wc.run]["dataset"]),
        models=lambda wc: list(multi_agent_job(wc.run)["bases"].values()),
    output:
        agents=directory(f"{RESULTS}/train/{{run}}/agents"),
        metrics=f"{RESULTS}/train/{{run}}/metrics.parquet",
        curves=report(
            f"{RESULTS}/train/{{run}}/curves.png",
            category="Training",
            subcategory="{run}",
            caption="../report/training_curves.rst",
        ),
        settings=f"{RESULTS}/train/{{run}}/settings.json",
    wildcard_constraints:
        run=_alternatives(EXP.multi_agent_runs()) or "(?!)",
    params:
        udpo=lambda wc: multi_agent_job(wc.run),
        settings=lambda wc: EXP.train_settings(wc.run),
        limit=lambda wc: DATASETS[TRAINING_RUNS[wc.run]["dataset"]]["limit"],
        accelerate_config=lambda wc: ACCELERATE_CONFIGS[wc.run],
        checkpoint_dir=lambda wc: f"{RESULTS}/train/{wc.run}/checkpoint",
    log:
        f"{LOGS}/train/{{run}}.log",
    benchmark:
        f"{BENCH}/train/{{run}}.tsv"
    threads: 2
    resources:
        gpu=planned_gpus("train_agents"),
        nodes=planned_nodes("train_agents"),
        tasks_per_gpu=planned_tasks_per_gpu("train_agents"),
        tasks=planned_tasks("train_agents"),
        mpi=planned_mpi("train_agents"),
        mem_mb=32000,
        runtime=1440,
    conda:
        SOFTWARE_ENV
    script:
        "../workflow_scripts/train/train_agents.py"


rule trained_agent:
    """One trained agent's folder (`trained:<run>/<agent>`), hard-linked out of the run's `agents/`."""
    input:
        f"{RESULTS}/train/{{run}}/agents",
    output:
        directory(f"{RESULTS}/train/{{run}}/models/{{agent}}"),
    log:
        f"{LOGS}/train/{{run}}.{{agent}}.log",
    run:
        from debatelab.io import link_tree

        link_tree(f"{input[0]}/{wildcards.agent}", output[0], log_path=log[0])
