rule zero_shot:
    """Pre-debate answers: every question × sample of one agent, with confidences (GPU-heavy)."""
    input:
        unpack(zero_shot_inputs),
    output:
        f"{RESULTS}/zero_shot/{{dataset}}/{{agent}}.parquet",
    params:
        agent=agent_settings,
        settings=lambda wc: {
            **config["zero_shot"],
            "samples": agent_samples(wc.agent),
            "seed": config["seed"],
            "limit": DATASETS[wc.dataset]["limit"],
        },
        cache_dir=generation_cache_dir,
    log:
        f"{LOGS}/zero_shot/{{dataset}}/{{agent}}.log",
    benchmark:
        f"{BENCH}/zero_shot/{{dataset}}/{{agent}}.tsv"
    threads: 2
    resources:
        mem_mb=16000,
        runtime=240,
    script:
        "../workflow_scripts/zero_shot.py"


rule attack_prompt:
    """AutoTransform: the rewriter model turns a dataset's system prompt into an adversarial one (UDPO §6)."""
    input:
        dataset=dataset_file,
        model=lambda wc: f"resources/models/{ATTACK['rewriter']}",
    output:
        f"{RESULTS}/attack/{{dataset}}.json",
    params:
        model=lambda wc: ATTACK["rewriter"],
        backend=lambda wc: ATTACK["backend"],
        backend_options=lambda wc: dict(config["backends"].get(ATTACK["backend"], {})),
        sampling=lambda wc: {k: ATTACK[k] for k in ("temperature", "top_p", "max_tokens")} | {"seed": config["seed"]},
        attempts=lambda wc: ATTACK["attempts"],
        cache_dir=lambda wc: f"{RESULTS}/cache/{ATTACK['rewriter']}",
    log:
        f"{LOGS}/attack_prompt/{{dataset}}.log",
    benchmark:
        f"{BENCH}/attack_prompt/{{dataset}}.tsv"
    threads: 2
    resources:
        mem_mb=16000,
        runtime=30,
    script:
        "../workflow_scripts/attack_prompt.py"
