rule download_dataset:
    """A benchmark split in the common schema: id, question, choices, answer, task_type, meta. Its file is
    named by what its rows depend on (`data.registry.split_file`): the source, and the seed where it picks
    the rows of a generated benchmark. The path alone says how to build it, so experiments sharing the file
    agree on the rule's params."""
    output:
        "data/{benchmark}/{split}/{variant}.parquet",
    params:
        source=lambda wc: parse_split_variant(wc.variant)[0],
        seed=lambda wc: parse_split_variant(wc.variant)[1],
    log:
        "logs/data/{benchmark}/{split}/{variant}.log",
    resources:
        mem_mb=4000,
        runtime=30,
    conda:
        SOFTWARE_ENV
    script:
        "../workflow_scripts/data/download_dataset.py"
