rule attack_prompt:
    """AutoTransform: the rewriter model turns a dataset's system prompt into an adversarial one (UDPO §6)."""
    input:
        dataset=dataset_file,
        model=lambda wc: EXP.model_dir(ATTACK["rewriter"]),
    output:
        f"{RESULTS}/attack/{{dataset}}.json",
    params:
        model=lambda wc: ATTACK["rewriter"],
        backend=lambda wc: ATTACK["backend"],
        backend_options=lambda wc: dict(config["backends"].get(ATTACK["backend"], {})),
        sampling=lambda wc: {k: ATTACK[k] for k in ("temperature", "top_p", "max_tokens")} | {"seed": config["seed"]},
        attempts=lambda wc: ATTACK["attempts"],
        cache_dir=lambda wc: generation_cache_dir(ATTACK["rewriter"]),
    log:
        f"{LOGS}/attack_prompt/{{dataset}}.log",
    benchmark:
        f"{BENCH}/attack_prompt/{{dataset}}.tsv"
    threads: 2
    resources:
        gpu=planned_gpus("attack_prompt"),
        mem_mb=16000,
        runtime=30,
    conda:
        SOFTWARE_ENV
    script:
        "../workflow_scripts/attack/attack_prompt.py"
