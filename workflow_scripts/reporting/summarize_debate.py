from debatelab.reporting.debate import summarize_debate
from debatelab.runlog import job_log

with job_log(snakemake.log[0]):
    summarize_debate(
        list(snakemake.input.questions),
        list(snakemake.input.turns),
        snakemake.output.table,
        snakemake.output.paper_table,
        snakemake.output.plot,
        prices=snakemake.params.prices,
        gpu_jobs=snakemake.params.get("gpu_jobs", []),
        zero_shot_gpu_jobs=snakemake.params.get("zero_shot_gpu_jobs", []),
        zero_shot_paths=list(snakemake.input.get("zero_shot", [])),
    )
