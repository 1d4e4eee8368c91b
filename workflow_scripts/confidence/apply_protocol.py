from debatelab.confidence.stage import apply_protocol_job
from debatelab.runlog import job_log

with job_log(snakemake.log[0]):
    apply_protocol_job(
        snakemake.input.streams,
        snakemake.input.calibration,
        list(snakemake.input.searches),
        snakemake.output.predictions,
        snakemake.output.metrics,
        snakemake.output.reliability,
        snakemake.output.rejection,
        dataset=snakemake.wildcards.dataset,
        pair=snakemake.wildcards.pair,
        ece_bins=snakemake.params.ece_bins,
        ece_weighting=snakemake.params.ece_weighting,
        plot_calibrator=snakemake.params.plot_calibrator,
    )
