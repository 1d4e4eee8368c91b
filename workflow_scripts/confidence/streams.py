from debatelab.confidence.streams import streams_job
from debatelab.runlog import job_log

with job_log(snakemake.log[0]):
    streams_job(
        snakemake.input.dataset,
        list(snakemake.input.zero_shot),
        snakemake.input.turns,
        snakemake.output[0],
        dataset=snakemake.wildcards.dataset,
        pair=snakemake.wildcards.pair,
        agents=list(snakemake.params.agents),
        estimators=list(snakemake.params.estimators),
        validation=(
            {
                "dataset_path": snakemake.input.val_dataset,
                "zero_shot_paths": list(snakemake.input.val_zero_shot),
                "turns_path": snakemake.input.val_turns,
                "dataset": snakemake.params.val_dataset,
            }
            if snakemake.params.val_dataset
            else None
        ),
    )
