rule zero_shot:
    """Pre-debate answers: every question × sample of one agent, with confidences (GPU-heavy)."""
    input:
        unpack(zero_shot_inputs),
    output:
        f"{RESULTS}/zero_shot/{{dataset}}/{{agent}}.parquet",
    params:
        agent=lambda wc: EXP.agent_settings(wc.agent, wc.dataset),
        settings=lambda wc: {
            **config["zero_shot"],
            "samples": EXP.agent_samples(wc.agent),
            "seed": config["seed"],
            "limit": DATASETS[wc.dataset]["limit"],
        },
        cache_dir=lambda wc: generation_cache_dir(AGENTS[wc.agent]["model"]),
    log:
        f"{LOGS}/zero_shot/{{dataset}}/{{agent}}.log",
    benchmark:
        f"{BENCH}/zero_shot/{{dataset}}/{{agent}}.tsv"
    threads: 2
    resources:
        gpu=planned_gpus("zero_shot"),
        mem_mb=16000,
        runtime=240,
    conda:
        SOFTWARE_ENV
    script:
        "../workflow_scripts/zero_shot/zero_shot.py"
