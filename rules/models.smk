rule micro_model:
    """The bundled micro model (`bundled:micro-chain`, docs/micro.md) built from its recipe
    (`debatelab.micro.recipe.MICRO_RECIPE`): the shipped folder is this rule's output, so a run
    builds it only when it is missing or asked to (`snakemake --forcerun micro_model`, 25-45 minutes
    on 2 CPU cores); every experiment on the micro model then prepares the new build."""
    output:
        directory(MICRO_SHIPPED),
    log:
        "logs/models/micro_model.log",
    benchmark:
        "logs/models/micro_model.benchmark.tsv"
    threads: 2
    resources:
        mem_mb=8000,
        runtime=120,
    conda:
        SOFTWARE_ENV
    script:
        "../workflow_scripts/models/micro_model.py"


rule prepare_model:
    """A plain Hugging Face model folder: bundled GGUF dequantised, tiny random Llama, hub id or local path.
    Named `<label>-<key>` by what it is built from (`models.model_settings`), not by the config's name for
    it: experiments of one working directory that build a model alike share the folder (params alike)."""
    input:
        unpack(prepare_model_inputs),
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
