from debatelab.reporting.zero_shot import summarize_zero_shot
from debatelab.runlog import job_log

with job_log(snakemake.log[0]):
    summarize_zero_shot(
        list(snakemake.input.answers),
        snakemake.output.table,
        snakemake.output.plot,
        prices=snakemake.params.prices,
        gpu_jobs=snakemake.params.get("gpu_jobs", []),
    )
