rule debate:
    """One protocol on one dataset, from the shared zero-shot answers (GPU-heavy)."""
    input:
        unpack(debate_inputs),
    output:
        turns=f"{RESULTS}/debate/{{dataset}}/{{protocol}}/turns.parquet",
        questions=f"{RESULTS}/debate/{{dataset}}/{{protocol}}/questions.parquet",
    params:
        protocol=lambda wc: EXP.protocol_options(wc.protocol),
        participants=lambda wc: EXP.protocol_participants(wc.protocol),
        agents=debate_agent_settings,
        zero_shot_paths=debate_zero_shot_paths,
        model_paths=lambda wc: {m: EXP.model_serving(m) for m in EXP.protocol_models(wc.protocol)},
        cache_dirs=lambda wc: {m: generation_cache_dir(m) for m in EXP.protocol_models(wc.protocol)},
        # Confidences on the last debate turns are elicited as in the zero-shot stage.
        settings=lambda wc: {
            "seed": config["seed"],
            "batch_size": config["debate"]["batch_size"],
            "top_logprobs": config["debate"]["top_logprobs"],
            **{k: v for k, v in config["zero_shot"].items() if k.startswith("verbal_") or k == "seqprob_target"},
        },
    log:
        f"{LOGS}/debate/{{dataset}}/{{protocol}}.log",
    benchmark:
        f"{BENCH}/debate/{{dataset}}/{{protocol}}.tsv"
    threads: 2
    resources:
        gpu=planned_gpus("debate"),
        mem_mb=16000,
        runtime=480,
    conda:
        SOFTWARE_ENV
    script:
        "../workflow_scripts/debate/debate.py"
