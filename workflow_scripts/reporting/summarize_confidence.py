from debatelab.confidence.fusion import BASELINES
from debatelab.reporting.confidence import summarize_confidence
from debatelab.runlog import job_log

with job_log(snakemake.log[0]):
    summarize_confidence(
        list(snakemake.input),
        snakemake.output.table,
        snakemake.output.lift,
        snakemake.output.paper_table,
        snakemake.output.plot,
        baselines=BASELINES,
        calibrator=snakemake.params.calibrator,
        alpha=snakemake.params.alpha,
    )
