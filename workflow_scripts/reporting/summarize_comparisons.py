from debatelab.evaluation.comparisons import summarize_comparisons
from debatelab.runlog import job_log

with job_log(snakemake.log[0]):
    summarize_comparisons(
        dict(snakemake.params.comparisons),
        list(snakemake.input.zero_shot),
        list(snakemake.input.questions),
        snakemake.output.table,
        snakemake.output.plot,
    )
