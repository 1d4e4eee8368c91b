from debatelab.models import prepare_model
from debatelab.runlog import job_log

with job_log(snakemake.log[0]):
    prepare_model(
        snakemake.wildcards.model,
        snakemake.params.source,
        snakemake.output[0],
        dtype=snakemake.params.dtype,
        seed=snakemake.params.seed,
        include=snakemake.params.include,
    )
