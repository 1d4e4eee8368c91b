rule debate:
    """One protocol on one dataset, from the shared zero-shot answers (GPU-heavy)."""
    input:
        unpack(debate_inputs),
    output:
        turns=f"{RESULTS}/debate/{{dataset}}/{{protocol}}/turns.parquet",
        questions=f"{RESULTS}/debate/{{dataset}}/{{protocol}}/questions.parquet",
    params:
        # `datasets` says where the workflow runs the protocol; it is no option of the protocol itself.
        protocol=lambda wc: {k: v for k, v in PROTOCOLS[wc.protocol].items() if k != "datasets"},
        participants=lambda wc: protocol_participants(wc.protocol),
        agents=debate_agent_settings,
        zero_shot_paths=debate_zero_shot_paths,
        model_paths=lambda wc: {m: f"resources/models/{m}" for m in debate_models(wc)},
        cache_dirs=lambda wc: {m: f"{RESULTS}/cache/{m}" for m in debate_models(wc)},
        settings=lambda wc: {
            "seed": config["seed"],
            "batch_size": DEBATE["batch_size"],
            "verbal_samples": config["zero_shot"]["verbal_samples"],
            "verbal_temperature": config["zero_shot"]["verbal_temperature"],
            "verbal_max_tokens": config["zero_shot"]["verbal_max_tokens"],
        },
    log:
        f"{LOGS}/debate/{{dataset}}/{{protocol}}.log",
    benchmark:
        f"{BENCH}/debate/{{dataset}}/{{protocol}}.tsv"
    threads: 2
    resources:
        mem_mb=16000,
        runtime=480,
    script:
        "../workflow_scripts/debate.py"
