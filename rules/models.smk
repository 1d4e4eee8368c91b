rule prepare_model:
    """A plain Hugging Face model folder: bundled GGUF dequantised, tiny random Llama, hub id or local path."""
    output:
        directory("resources/models/{model}"),
    params:
        source=lambda wc: MODELS[wc.model]["source"],
        dtype=lambda wc: MODELS[wc.model]["dtype"],
        include=lambda wc: MODELS[wc.model].get("include"),
        seed=config["seed"],
    log:
        "logs/models/{model}.log",
    benchmark:
        "logs/models/{model}.benchmark.tsv"
    resources:
        mem_mb=8000,
        runtime=60,
    conda:
        SOFTWARE_ENV
    script:
        "../workflow_scripts/models/prepare_model.py"
