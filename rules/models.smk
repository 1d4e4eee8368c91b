rule prepare_model:
    """A plain Hugging Face model folder: bundled GGUF dequantised, tiny random Llama, hub id or local path.
    Named `<label>-<key>` by what it is built from (`models.model_settings`), not by the config's name for
    it: experiments of one working directory that build a model alike share the folder (params alike)."""
    output:
        directory("resources/models/{model_folder}"),
    params:
        settings=lambda wc: PREPARED_MODELS[wc.model_folder],
    log:
        "logs/models/{model_folder}.log",
    benchmark:
        "logs/models/{model_folder}.benchmark.tsv"
    resources:
        mem_mb=8000,
        runtime=60,
    conda:
        SOFTWARE_ENV
    script:
        "../workflow_scripts/models/prepare_model.py"
