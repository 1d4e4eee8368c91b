rule download_dataset:
    """A benchmark split in the common schema: id, question, choices, answer, task_type, meta."""
    output:
        "data/{dataset}/{split}.parquet",
    params:
        source=download_source,
        seed=config["seed"],
    log:
        "logs/data/{dataset}/{split}.log",
    resources:
        mem_mb=4000,
        runtime=30,
    conda:
        SOFTWARE_ENV
    script:
        "../workflow_scripts/data/download_dataset.py"
